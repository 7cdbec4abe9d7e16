package hub_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/store"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

func TestMatchGroupFilter(t *testing.T) {
	cases := []struct {
		filter, topic string
		want          bool
	}{
		{"#", "a", true}, {"#", "a/b/c", true},
		{"a/#", "a", true}, {"a/#", "a/b", true}, {"a/#", "ab", false},
		{"a/+", "a/b", true}, {"a/+", "a", false}, {"a/+", "a/b/c", false}, {"a/+", "a/", true},
		{"+/b", "a/b", true}, {"+/b", "a/c", false}, {"+", "a", true}, {"+", "a/b", false},
		{"a/b", "a/b", true}, {"a/b", "a/b/c", false}, {"a/b/c", "a/b", false},
		{"+/+/#", "a/b", true}, {"+/+/#", "a", false},
	}
	for _, c := range cases {
		if err := hub.ValidGroupFilter(c.filter); err != nil {
			t.Fatalf("%q: %v", c.filter, err)
		}
		if got := hub.MatchGroupFilter(c.filter, c.topic); got != c.want {
			t.Errorf("hub.MatchGroupFilter(%q, %q) = %v, want %v", c.filter, c.topic, got, c.want)
		}
	}
}

func TestGroupTopicsAndFiltersAreChecked(t *testing.T) {
	long := string(make([]byte, hub.MaxGroupTopic+1))
	for _, bad := range []string{"", "a/#/b", "a#", "+a", "a/b+", "x\x00", "\xff", long} {
		if err := hub.ValidGroupFilter(bad); hub.ErrorCode(err) != hub.EINVALID {
			t.Errorf("filter %q: %v, want invalid", bad, err)
		}
	}
	for _, bad := range []string{"", "a/#", "+", "a/+/b", "x\x00", "\xff", long} {
		if err := hub.ValidGroupTopic(bad); hub.ErrorCode(err) != hub.EINVALID {
			t.Errorf("topic %q: %v, want invalid", bad, err)
		}
	}
	for _, ok := range []string{"a", "a/b/c", "temp/", "ä/ö"} {
		if err := hub.ValidGroupTopic(ok); err != nil {
			t.Errorf("topic %q: %v", ok, err)
		}
	}
}

// Only a principal that speaks for a member Thing uses a group's channels;
// a Thing-bound token speaks for its Thing only while it is valid.
func TestChannelMember(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tokens := hub.NewTokens(db, nil)
	_, bound, err := tokens.CreateBound("b", hub.ScopeRead, time.Time{}, "urn:m")
	if err != nil || bound.Thing != "urn:m" {
		t.Fatal(err)
	}
	_, other, _ := tokens.CreateBound("o", hub.ScopeRead, time.Time{}, "urn:other")
	_, admin, _ := tokens.CreateScoped("a", hub.ScopeAdmin, time.Time{})
	if _, _, err := tokens.CreateBound("x", hub.ScopeRead, time.Time{}, "not an id"); hub.ErrorCode(err) != hub.EINVALID {
		t.Fatalf("a token bound to a bad id: %v", err)
	}
	a, _ := hub.NewAccess(hub.AnonymousOperate, "open", tokens)
	isMember := func(gid, thing string) bool { return gid == "g" && thing == "urn:m" }
	cases := []struct {
		who  string
		p    hub.Principal
		code string
	}{
		{"the member Thing", hub.ThingPrincipal("urn:m", "", false), ""},
		{"its bound token", hub.TokenPrincipal(bound, ""), ""},
		{"another Thing", hub.ThingPrincipal("urn:other", "", true), hub.EFORBIDDEN},
		{"a token bound to another Thing", hub.TokenPrincipal(other, ""), hub.EFORBIDDEN},
		{"an admin token", hub.TokenPrincipal(admin, ""), hub.EFORBIDDEN},
		{"anonymous", hub.AnonymousFrom(""), hub.EUNAUTHORIZED},
	}
	for _, c := range cases {
		member, err := a.ChannelMember(c.p, "g", isMember)
		if hub.ErrorCode(err) != c.code || (err == nil) != (member == "urn:m") {
			t.Errorf("%s: %q, %v; want code %q", c.who, member, err, c.code)
		}
		if hub.MemberOf(c.p) == "" && c.code == "" {
			t.Errorf("%s: hub.MemberOf is empty", c.who)
		}
	}
	if _, err := a.ChannelMember(hub.ThingPrincipal("urn:m", "", false), "h", isMember); hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Errorf("the member on another group: %v", err)
	}
	if err := tokens.Revoke(bound.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ChannelMember(hub.TokenPrincipal(bound, ""), "g", isMember); hub.ErrorCode(err) != hub.EUNAUTHORIZED {
		t.Errorf("a revoked bound token: %v, want unauthorized", err)
	}
}

// A group message reaches a client as the JSON or CBOR value it holds, or
// as bytes when it holds neither.
func TestGroupMessageValue(t *testing.T) {
	cborOf := func(v any) []byte { b, _ := lmos.EncodeCBOR(v); return b }
	cases := []struct {
		name       string
		msg        hub.GroupMessage
		media      string
		want       []byte
		wantCT     string
		wantOpaque bool
	}{
		{"json to json", hub.GroupMessage{Payload: []byte(`{"a":1}`), ContentType: "application/json"}, lmos.MediaJSON, []byte(`{"a":1}`), "application/json", false},
		{"no type, json", hub.GroupMessage{Payload: []byte(`42`)}, lmos.MediaJSON, []byte(`42`), "", false},
		{"cbor to json", hub.GroupMessage{Payload: cborOf(map[string]any{"a": 1}), ContentType: "application/cbor"}, lmos.MediaJSON, []byte(`{"a":1}`), "application/cbor", false},
		{"json to cbor", hub.GroupMessage{Payload: []byte(`[1,2]`), ContentType: "application/json"}, lmos.MediaCBOR, cborOf([]any{1, 2}), "application/json", false},
		{"text", hub.GroupMessage{Payload: []byte("on"), ContentType: "text/plain"}, lmos.MediaJSON, []byte(`"b24="`), "text/plain", true},
		{"no type, not json", hub.GroupMessage{Payload: []byte("hello")}, lmos.MediaJSON, []byte(`"aGVsbG8="`), "application/octet-stream", true},
		{"claims json", hub.GroupMessage{Payload: []byte("{"), ContentType: "application/json"}, lmos.MediaCBOR, cborOf([]byte("{")), "application/octet-stream", true},
	}
	for _, c := range cases {
		got, ct := c.msg.Value(hub.Decoder{}, c.media)
		if string(got) != string(c.want) || ct != c.wantCT {
			t.Errorf("%s: %x %q, want %x %q", c.name, got, ct, c.want, c.wantCT)
		}
		if c.media == lmos.MediaJSON && !json.Valid(got) {
			t.Errorf("%s: not JSON: %s", c.name, got)
		}
	}
}

// FuzzGroupFilter: any filter and topic a client sends are checked without
// panicking; a valid filter matches itself once its wildcards are filled,
// and a valid topic matches "#" and itself.
func FuzzGroupFilter(f *testing.F) {
	for _, s := range [][2]string{{"#", "a/b"}, {"a/+", "a/b"}, {"+/#", "x"}, {"a/#/b", "a"}, {"", ""}, {"a//b", "a//b"}, {"\xff", "+"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if hub.ValidGroupFilter(filter) == nil {
			_ = hub.MatchGroupFilter(filter, topic)
			filled := strings.ReplaceAll(strings.ReplaceAll(filter, "+", "x"), "#", "y")
			if hub.ValidGroupTopic(filled) == nil && !hub.MatchGroupFilter(filter, filled) {
				t.Fatalf("%q does not match %q", filter, filled)
			}
		}
		if hub.ValidGroupTopic(topic) == nil {
			if hub.ValidGroupFilter(topic) != nil || !hub.MatchGroupFilter(topic, topic) || !hub.MatchGroupFilter("#", topic) {
				t.Fatalf("topic %q", topic)
			}
		}
	})
}
