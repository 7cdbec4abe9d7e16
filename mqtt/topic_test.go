package mqtt

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

func TestParseThingTopic(t *testing.T) {
	tests := []struct {
		topic string
		ok    bool
		kind  topicKind
		tid   string
		name  string
	}{
		{"lmos/v1/things/urn:a/td", true, kindTD, "urn:a", ""},
		{"lmos/v1/things/urn:a/td/result", true, kindTDResult, "urn:a", ""},
		{"lmos/v1/things/urn:a/status", true, kindStatus, "urn:a", ""},
		{"lmos/v1/things/urn:a/properties/temp", true, kindProperty, "urn:a", "temp"},
		{"lmos/v1/things/urn:a/properties/temp/set", true, kindPropertySet, "urn:a", "temp"},
		{"lmos/v1/things/urn:a/actions/chat", true, kindAction, "urn:a", "chat"},
		{"lmos/v1/things/urn:a/events/alarm", true, kindEvent, "urn:a", "alarm"},
		{"lmos/v1/things/urn:a/actions/chat/x", true, kindOther, "urn:a", ""},
		{"lmos/v1/things/urn:a/properties//set", true, kindOther, "urn:a", ""},
		{"lmos/v1/things/https:%2F%2Fx/td", true, kindTD, "https:%2F%2Fx", ""},
		{"lmos/v1/things/urn:a", false, 0, "", ""},
		{"lmos/v1/things/urn:a/", false, 0, "", ""},
		{"lmos/v1/things//td", false, 0, "", ""},
		{"lmos/v1/things/+/td", false, 0, "", ""},
		{"lmos/v1/hub/status", false, 0, "", ""},
	}
	for _, tt := range tests {
		got, ok := parseThingTopic(tt.topic)
		if ok != tt.ok || got.kind != tt.kind || got.tid != tt.tid || got.name != tt.name {
			t.Errorf("parseThingTopic(%q) = %+v, %v; want kind %v tid %q name %q ok %v", tt.topic, got, ok, tt.kind, tt.tid, tt.name, tt.ok)
		}
		if ok && got.String() != tt.topic {
			t.Errorf("String() = %q, want %q", got.String(), tt.topic)
		}
	}
}

func TestIDOf(t *testing.T) {
	for _, id := range []string{"urn:uuid:1", "https://x.example/a+b#c", "did:key:z6Mk", "urn:a%2Fb"} {
		got, ok := idOf(lmos.TopicKey(id))
		if !ok || got != id {
			t.Errorf("idOf(TopicKey(%q)) = %q, %v", id, got, ok)
		}
	}
	for _, tid := range []string{"urn:%41", "urn:%zz", "noscheme", "", "urn:a%2fb"} {
		if id, ok := idOf(tid); ok {
			t.Errorf("idOf(%q) = %q, want refused", tid, id)
		}
	}
}

func TestACL(t *testing.T) {
	const me = "urn:me"
	pub := []struct {
		self, topic string
		ok          bool
	}{
		{"", "lmos/v1/things/urn:x/actions/chat", true},
		{"", "lmos/v1/things/urn:x/properties/t/set", true},
		{"", "lmos/v1/things/urn:x/td", true},
		{"", "lmos/v1/clients/c1/reply", true},
		{"", "lmos/v1/clients/c1", true},
		{"", "lmos/v1/things/urn:x/status", false},
		{"", "lmos/v1/things/urn:x/properties/t", false},
		{"", "lmos/v1/things/urn:x/events/e", false},
		{"", "lmos/v1/things/urn:x/td/result", false},
		{"", "lmos/v1/hub/status", false},
		{"", "lmos/v1/groups/g/x", false},
		{"", "other/topic", false},
		{me, "lmos/v1/things/urn:me/status", true},
		{me, "lmos/v1/things/urn:me/anything/deep/down", true},
		{me, "lmos/v1/things/urn:other/status", false},
		{me, "lmos/v1/things/urn:other/actions/a", true},
	}
	for _, tt := range pub {
		if got := mayPublish(tt.self, tt.topic); got != tt.ok {
			t.Errorf("mayPublish(%q, %q) = %v, want %v", tt.self, tt.topic, got, tt.ok)
		}
	}
	read := []struct {
		client, self, filter string
		ok                   bool
	}{
		{"c1", "", "lmos/v1/things/+/td", true},
		{"c1", "", "lmos/v1/things/+/status", true},
		{"c1", "", "lmos/v1/things/urn:x/properties/+", true},
		{"c1", "", "lmos/v1/things/+/events/+", true},
		{"c1", "", "lmos/v1/things/+/td/result", true},
		{"c1", "", "lmos/v1/hub/#", true},
		{"c1", "", "lmos/v1/hub/events", true},
		{"c1", "", "lmos/v1/clients/c1/#", true},
		{"c1", "", "lmos/v1/clients/c2/#", false},
		{"c1", "", "lmos/v1/clients/+/#", false},
		{"+", "", "lmos/v1/clients/+/#", false},
		{"c1", "", "lmos/v1/things/+/actions/+", false},
		{"c1", "", "lmos/v1/things/urn:x/actions/chat", false},
		{"c1", "", "lmos/v1/things/+/properties/+/set", false},
		{"c1", "", "lmos/v1/things/+/properties/#", false},
		{"c1", "", "lmos/v1/things/+/+", false},
		{"c1", "", "lmos/v1/things/#", false},
		{"c1", "", "lmos/v1/#", false},
		{"c1", "", "#", false},
		{"c1", "", "$SYS/#", false},
		{"c1", "", "lmos/v1/groups/g/#", false},
		{"c1", me, "lmos/v1/things/urn:me/actions/+", true},
		{"c1", me, "$share/workers/lmos/v1/things/urn:me/actions/+", true},
		{"c1", me, "lmos/v1/things/urn:me/properties/+/set", true},
		{"c1", me, "lmos/v1/things/+/actions/+", false},
		{"c1", me, "lmos/v1/things/urn:other/actions/+", false},
		{"c1", "", "$share/g/lmos/v1/things/urn:me/actions/+", false},
		{"c1", "", "$share//lmos/v1/hub/#", false},
	}
	for _, tt := range read {
		if got := mayRead(tt.client, tt.self, tt.filter); got != tt.ok {
			t.Errorf("mayRead(%q, %q, %q) = %v, want %v", tt.client, tt.self, tt.filter, got, tt.ok)
		}
	}
}

func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"lmos/v1/things/urn:a/td", "lmos/v1/things/urn:a/properties/p/set",
		"lmos/v1/things/a%2Fb/actions/x", "lmos/v1/things//", "lmos/v1/things/+/#", "lmos/v1/clients/c/x", ""} {
		f.Add(s, "urn:a")
	}
	f.Fuzz(func(t *testing.T, topic, self string) {
		tt, ok := parseThingTopic(topic)
		if ok {
			if tt.String() != topic {
				t.Fatalf("String() = %q, want %q", tt.String(), topic)
			}
			if tt.tid == "" || strings.ContainsAny(tt.tid, "/+#") {
				t.Fatalf("bad tid %q", tt.tid)
			}
			if (tt.kind == kindProperty || tt.kind == kindAction || tt.kind == kindEvent || tt.kind == kindPropertySet) &&
				(tt.name == "" || strings.ContainsAny(tt.name, "/+#")) {
				t.Fatalf("bad name %q", tt.name)
			}
		}
		if id, ok := idOf(tt.tid); ok && lmos.TopicKey(id) != tt.tid {
			t.Fatalf("idOf(%q) = %q is not canonical", tt.tid, id)
		}
		// A Thing never reads another Thing's actions, whatever the filter.
		if mayRead("c", self, topic) && strings.Contains(topic, "/actions/") {
			if tt, ok := parseThingTopic(strings.TrimPrefix(topic, "$share/x/")); ok && tt.kind == kindAction && tt.tid != self && self != "" && tt.tid != "+" {
				t.Fatalf("%q may read %q", self, topic)
			}
		}
		_ = mayPublish(self, topic)
	})
}

// readableByAll holds exactly where OnACLCheck allows every reader: a
// Thing, another Thing, anonymous clients with and without an inbox id.
func TestReadableByAll(t *testing.T) {
	readers := [][2]string{{"c1", "urn:a"}, {"c2", "urn:b"}, {"anon", ""}, {"x/y", ""}}
	for _, topic := range []string{
		"lmos/v1/hub/status", "lmos/v1/hub/events",
		"lmos/v1/things/urn:a/td", "lmos/v1/things/urn:a/td/result", "lmos/v1/things/urn:a/status",
		"lmos/v1/things/urn:a/properties/t", "lmos/v1/things/urn:a/properties/t/set",
		"lmos/v1/things/urn:a/events/e", "lmos/v1/things/urn:a/actions/go",
		"lmos/v1/clients/c1/replies", "lmos/v1/groups/g", "$SYS/broker/uptime", "other/topic",
	} {
		all := true
		for _, r := range readers {
			if !mayRead(r[0], r[1], topic) {
				all = false
			}
		}
		if strings.HasSuffix(topic, "/td/result") {
			all = false // only its publisher, while a result is out
		}
		if got := readableByAll(topic); got != all {
			t.Errorf("readableByAll(%s) = %v, want %v", topic, got, all)
		}
	}
}
