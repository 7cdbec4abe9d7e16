package app

import (
	"strings"
	"testing"
	"time"
)

// The sync settings: read from the file and the environment, each refused
// with its name and why, the token never printed.
func TestSyncPullSettings(t *testing.T) {
	c, err := LoadConfig(nil, envMap(map[string]string{"LMOS_HUB_SYNC_URL": "http://hub-2:8080", "LMOS_HUB_SYNC_TOKEN": "secret-token",
		"LMOS_HUB_SYNC_PULL": "$[?@.title == 'Lamp']", "LMOS_HUB_SYNC_INTERVAL": "1m"}))
	if err != nil || c.Sync.URL != "http://hub-2:8080" || c.Sync.Token != "secret-token" || c.Sync.Pull != "$[?@.title == 'Lamp']" || c.Sync.Interval != Duration(time.Minute) {
		t.Fatalf("env: %+v %v", c.Sync, err)
	}
	if r := c.Redacted(); r.Sync.Token != "<redacted>" || c.Sync.Token != "secret-token" {
		t.Fatalf("redacted token %q", r.Sync.Token)
	}
	if d := DefaultConfig().Sync; d.URL != "" || d.Pull != "" || d.Interval != Duration(30*time.Second) {
		t.Fatalf("defaults %+v", d)
	}
	c, err = LoadConfig([]string{"--config", writeConfigFile(t, "sync:\n  url: https://tdd.example/api\n  pull: \"$\"\n")}, nil)
	if err != nil || c.Sync.URL != "https://tdd.example/api" || c.Sync.Pull != "$" {
		t.Fatalf("file: %+v %v", c.Sync, err)
	}
	for _, bad := range []struct {
		edit    func(*Config)
		setting string
		why     string
	}{
		{func(c *Config) { c.Sync.URL = "hub-2:8080" }, "sync.url", "http or https base URL"},
		{func(c *Config) { c.Sync.URL = "ftp://hub-2" }, "sync.url", "http or https base URL"},
		{func(c *Config) { c.Sync.Pull = "$" }, "sync.pull", "needs sync.url"},
		{func(c *Config) { c.Sync.URL, c.Sync.Pull = "http://h", "$[?" }, "sync.pull", "is not a JSONPath query"},
		{func(c *Config) { c.Sync.Token = "a b" }, "sync.token", "printable ASCII"},
		{func(c *Config) { c.Sync.Interval = Duration(time.Millisecond) }, "sync.interval", "at least 1s"},
	} {
		c := DefaultConfig()
		bad.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), bad.setting+": ") || !strings.Contains(err.Error(), bad.why) {
			t.Errorf("%s: %v, want the setting and %q", bad.setting, err, bad.why)
		}
	}
}
