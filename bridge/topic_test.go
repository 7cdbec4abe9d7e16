package bridge

import (
	"strings"
	"testing"
)

// mosquitto.conf(5)'s table of prefix combinations, and what each maps.
func TestTopicPrefixTable(t *testing.T) {
	for _, c := range []struct {
		pattern, local, remote string
		valid                  bool
		fullLocal, fullRemote  string
	}{
		{"pattern", "L/", "R/", true, "L/pattern", "R/pattern"},
		{"pattern", "L/", "", true, "L/pattern", "pattern"},
		{"pattern", "", "R/", false, "", ""}, // valid for mosquitto; here an in topic must not land at the root
		{"pattern", "", "", true, "pattern", "pattern"},
		{"", "local", "remote", true, "local", "remote"},
		{"", "local", "", false, "", ""},
		{"", "", "remote", false, "", ""},
		{"", "", "", false, "", ""},
	} {
		tp := Topic{Pattern: c.pattern, Direction: Both, QoS: 1, LocalPrefix: c.local, RemotePrefix: c.remote}
		err := tp.validate()
		if c.pattern == "pattern" && c.local == "" && c.remote == "R/" {
			// Valid out of the hub: only the in side needs its own level.
			tp.Direction = Out
			if err := tp.validate(); err != nil {
				t.Errorf("%+v: %v", tp, err)
			}
			continue
		}
		if (err == nil) != c.valid {
			t.Errorf("%+v: valid = %v (%v), want %v", tp, err == nil, err, c.valid)
			continue
		}
		if !c.valid {
			continue
		}
		if got := tp.LocalFilter(); got != c.fullLocal {
			t.Errorf("%+v: local %q, want %q", tp, got, c.fullLocal)
		}
		if got := tp.toRemote(c.fullLocal); got != c.fullRemote {
			t.Errorf("%+v: remote %q, want %q", tp, got, c.fullRemote)
		}
		if got := tp.toLocal(c.fullRemote); got != c.fullLocal {
			t.Errorf("%+v: back %q, want %q", tp, got, c.fullLocal)
		}
	}
}

// Incoming messages never land on the hub's own topics or $ topics.
func TestTopicRefusals(t *testing.T) {
	for _, c := range []struct {
		t    Topic
		want string
	}{
		{Topic{Pattern: "#", Direction: In}, "begin with a level of its own"},
		{Topic{Pattern: "things/#", Direction: In, LocalPrefix: "lmos/v1/"}, "not lmos/"},
		{Topic{Pattern: "x", Direction: Both, LocalPrefix: "$SYS/"}, "not $"},
		{Topic{Pattern: "+/x", Direction: In, LocalPrefix: ""}, "begin with a level"},
		{Topic{Pattern: "a/#/b", Direction: Out}, "not a valid topic filter"},
		{Topic{Pattern: "a", Direction: "sideways"}, "not in, out or both"},
		{Topic{Pattern: "a", QoS: 3}, "qos 3"},
		{Topic{Pattern: "a", LocalPrefix: "x/+/"}, "wildcards"},
	} {
		err := c.t.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.t, err, c.want)
		}
	}
	if err := (Topic{Pattern: "things/+/events/#", Direction: Out, LocalPrefix: "lmos/v1/", RemotePrefix: "site/"}).validate(); err != nil {
		t.Errorf("out of lmos/: %v", err)
	}
}

func TestConfigValidateNamesTheSetting(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://x:1", Name: "u", Topics: []Topic{{Pattern: "a"}}}, "bridge.url"},
		{Config{URL: "mqtt://", Name: "u", Topics: []Topic{{Pattern: "a"}}}, "bridge.url"},
		{Config{URL: "mqtt://x:1", Name: "a/b", Topics: []Topic{{Pattern: "a"}}}, "bridge.name"},
		{Config{URL: "mqtt://x:1", Name: "u"}, "bridge.topics"},
		{Config{URL: "mqtt://x:1", Name: "u", Topics: []Topic{{Pattern: "a"}, {Pattern: "#", Direction: In}}}, "bridge.topics[1]"},
		{Config{URL: "mqtt://x:1", Name: "u", Fingerprint: "zz", Topics: []Topic{{Pattern: "a"}}}, "bridge.fingerprint"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error on %s", c.cfg, err, c.want)
		}
	}
}
