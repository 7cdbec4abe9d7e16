package lmos

import (
	"net/url"
	"strings"
	"testing"
)

// The vectors of PROTOCOL §1: '%', '/', '+', '#' percent-encoded with
// upper-case hex, everything else unchanged.
func TestTopicKey(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03", "urn:uuid:9e4f1d2c-3b6a-4f8e-8c71-0a2b3c4d5e03"},
		{"did:key:z6Mk", "did:key:z6Mk"},
		{"https://x/y", "https:%2F%2Fx%2Fy"},
		{"a+b#c%d/e", "a%2Bb%23c%25d%2Fe"},
		{"urn:x:%2F", "urn:x:%252F"},
		{"urn:ü:*?&=", "urn:ü:*?&="},
	}
	for _, tc := range cases {
		if got := TopicKey(tc.in); got != tc.want {
			t.Errorf("TopicKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if back, err := url.PathUnescape(TopicKey(tc.in)); err != nil || back != tc.in {
			t.Errorf("PathUnescape(TopicKey(%q)) = %q, %v", tc.in, back, err)
		}
		if back, ok := IDOfTopicKey(tc.want); !ok || back != tc.in {
			t.Errorf("IDOfTopicKey(%q) = %q, %v, want %q", tc.want, back, ok, tc.in)
		}
	}
	// Encoding '%' keeps distinct ids on distinct topics.
	if TopicKey("a/b") == TopicKey("a%2Fb") {
		t.Error("TopicKey collides for a/b and a%2Fb")
	}
}

// Only the canonical key of an id names it, so a Thing has one set of
// topics: lower-case hex, needless escapes and bad escapes are refused.
func TestIDOfTopicKeyRefusesOtherSpellings(t *testing.T) {
	for _, tid := range []string{"a%2fb", "urn%3Ax", "a%41", "%zz", "a%", "a%2"} {
		if id, ok := IDOfTopicKey(tid); ok {
			t.Errorf("IDOfTopicKey(%q) = %q, want refused", tid, id)
		}
	}
}

func TestThingTopicAndPath(t *testing.T) {
	if got := ThingTopic("https://x/y", "events/alarm"); got != "lmos/v1/things/https:%2F%2Fx%2Fy/events/alarm" {
		t.Errorf("ThingTopic = %q", got)
	}
	if got := ThingPath("https://ex.org/a b"); got != "/things/https:%2F%2Fex.org%2Fa%20b" {
		t.Errorf("ThingPath = %q", got)
	}
	if !strings.HasPrefix(ClientsPrefix, "lmos/v1/") || !strings.HasSuffix(ClientsPrefix, "/") {
		t.Errorf("ClientsPrefix = %q", ClientsPrefix)
	}
}

// The names PROTOCOL §4.1 and §8 spell out, pinned: changing one is a wire
// change.
func TestWireNamesAsPROTOCOLSpellsThem(t *testing.T) {
	for got, want := range map[string]string{
		ThingTopic("a/b", "td/result"): "lmos/v1/things/a%2Fb/td/result",
		ClientsPrefix + "c1/x":         "lmos/v1/clients/c1/x",
		HubStatusTopic:                 "lmos/v1/hub/status",
		HubEventsTopic:                 "lmos/v1/hub/events",
		ServiceDirectory:               "_directory._sub._wot._tcp",
		ServiceMQTT:                    "_mqtt._tcp",
		TXTPath + "=" + DirectoryPath:  "td=/.well-known/wot",
	} {
		if got != want {
			t.Errorf("%q, PROTOCOL says %q", got, want)
		}
	}
}
