package app

import (
	"strings"
	"testing"
	"time"
)

func TestSyncSettings(t *testing.T) {
	c, err := LoadConfig(nil, nil)
	if err != nil || c.Sync.URL != "" || c.Sync.Interval != Duration(30*time.Second) || c.Sync.TTL != 0 {
		t.Fatalf("defaults: %+v %v; want off, 30s, ttl 0 (3 × interval)", c.Sync, err)
	}
	path := writeConfigFile(t, "sync:\n  url: http://tdd.example:8080/dir\n  token: secret-0123456789\n  interval: 30s\n  ttl: 2m\n")
	c, err = LoadConfig([]string{"--config", path}, nil)
	if err != nil || c.Sync.URL != "http://tdd.example:8080/dir" || c.Sync.Token != "secret-0123456789" ||
		c.Sync.Interval != Duration(30*time.Second) || c.Sync.TTL != Duration(2*time.Minute) {
		t.Fatalf("file: %+v %v", c.Sync, err)
	}
	env := envMap(map[string]string{"LMOS_HUB_SYNC_URL": "https://other:8443", "LMOS_HUB_SYNC_TOKEN": "tok-0123456789abcdef",
		"LMOS_HUB_SYNC_INTERVAL": "10s", "LMOS_HUB_SYNC_TTL": "1m"})
	c, err = LoadConfig([]string{"--config", path}, env)
	if err != nil || c.Sync.URL != "https://other:8443" || c.Sync.Token != "tok-0123456789abcdef" ||
		c.Sync.Interval != Duration(10*time.Second) || c.Sync.TTL != Duration(time.Minute) {
		t.Fatalf("env: %+v %v", c.Sync, err)
	}
	red := c.Redacted()
	if red.Sync.Token != "<redacted>" || c.Sync.Token == "<redacted>" {
		t.Fatalf("Redacted sync.token = %q (original %q)", red.Sync.Token, c.Sync.Token)
	}
	c.Sync.URL = "https://user:pw@other:8443"
	if got := c.Redacted().Sync.URL; strings.Contains(got, "pw") {
		t.Fatalf("Redacted sync.url = %q", got)
	}
	for _, bad := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LMOS_HUB_SYNC_URL": "ftp://x"}, "sync.url: must be the http or https base URL"},
		{map[string]string{"LMOS_HUB_SYNC_URL": "tdd.example:8080"}, "sync.url"},
		{map[string]string{"LMOS_HUB_SYNC_URL": "http://x/?q=1"}, "sync.url"},
		{map[string]string{"LMOS_HUB_SYNC_INTERVAL": "500ms"}, "sync.interval: must be a duration of at least 1s"},
		{map[string]string{"LMOS_HUB_SYNC_TTL": "50s"}, "sync.ttl: must be 0 (3 × sync.interval) or at least twice sync.interval, 1m0s"},
		{map[string]string{"LMOS_HUB_SYNC_TTL": "4000d"}, "sync.ttl: must be at most 3650d"},
		{map[string]string{"LMOS_HUB_SYNC_INTERVAL": "soon"}, "LMOS_HUB_SYNC_INTERVAL"},
	} {
		if _, err := LoadConfig(nil, envMap(bad.env)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v, want %q", bad.env, err, bad.want)
		}
	}
	found := 0
	for _, v := range EnvVars() {
		switch v.Name {
		case "LMOS_HUB_SYNC_URL", "LMOS_HUB_SYNC_TOKEN", "LMOS_HUB_SYNC_INTERVAL", "LMOS_HUB_SYNC_TTL":
			found++
		}
	}
	if found != 4 {
		t.Fatalf("EnvVars lists %d of the 4 sync variables", found)
	}
}
