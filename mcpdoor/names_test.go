package mcpdoor

import (
	"strings"
	"testing"
)

func TestSlugAndToolNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Living room thermostat", "living_room_thermostat"},
		{"Küche – Licht (oben)", "kuche_licht_oben"},
		{"  __x__y  ", "x_y"},
		{"温度計", ""},
		{"ﬁre alarm", "fire_alarm"}, // NFKD splits the ligature
	} {
		if got := slug(tc.in, true); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("very long title ", 10)
	for _, tc := range []struct {
		prefix, dis, action, want string
	}{
		{"living_room", "", "setTarget", "living_room__setTarget"},
		{"", "", "go", "thing__go"},
		{"x", "", "é", "x__e"},
		{"x", "", "!!", "x__action"},
		{"kitchen", "abc123", "on", "kitchen_abc123__on"},
	} {
		if got := toolName(tc.prefix, tc.dis, tc.action, "key"); got != tc.want {
			t.Errorf("toolName(%q, %q, %q) = %q, want %q", tc.prefix, tc.dis, tc.action, got, tc.want)
		}
	}
	for _, action := range []string{"a", strings.Repeat("b", 31), strings.Repeat("c", 200)} {
		name := toolName(slug(long, true), tag("id"), action, "id")
		if !validName(name) {
			t.Errorf("toolName of a long title and action %d long is %q (%d)", len(action), name, len(name))
		}
	}
	// A long action keeps its distinction: two that share 200 characters
	// differ in their tags.
	a := toolName("t", "", strings.Repeat("c", 100)+"1", "id")
	b := toolName("t", "", strings.Repeat("c", 100)+"2", "id")
	if a == b || !validName(a) || !validName(b) {
		t.Errorf("long actions: %q %q", a, b)
	}
}

// TestNameAllIsOrderFreeAndUnique: names depend on the set of Things, not
// on the order they came in; Things whose titles read the same each get a
// tag of their id; every name is valid and none is taken twice, nor a
// name of the door's own tools.
func TestNameAllIsOrderFreeAndUnique(t *testing.T) {
	mk := func(id, title string, actions ...string) *entry {
		return &entry{title: title, slug: slug(title, true), actions: actions}
	}
	build := func() map[string]*entry {
		return map[string]*entry{
			"urn:a": mk("urn:a", "Lamp", "on", "off"),
			"urn:b": mk("urn:b", "lamp!", "on"),
			"urn:c": mk("urn:c", "Heater", "set-x", "set_x"),
			"urn:d": mk("urn:d", "find", "tools"),
			"urn:e": mk("urn:e", "", "go"),
		}
	}
	first := nameAll(build(), nil)
	for range 20 { // map order varies from run to run
		again := nameAll(build(), nil)
		if strings.Join(sortedNames(again), " ") != strings.Join(sortedNames(first), " ") {
			t.Fatalf("names changed: %v vs %v", sortedNames(again), sortedNames(first))
		}
	}
	want := map[string]bool{"lamp_" + tag("urn:a") + "__on": true, "lamp_" + tag("urn:a") + "__off": true, "lamp_" + tag("urn:b") + "__on": true, "thing__go": true}
	for n, r := range first {
		if !validName(n) || n == findToolsName || n == callToolName || r.thing == "" {
			t.Errorf("bad name %q", n)
		}
		delete(want, n)
	}
	if len(want) != 0 {
		t.Errorf("missing %v in %v", want, sortedNames(first))
	}
	if len(first) != 7 {
		t.Errorf("%d names, want 7: %v", len(first), sortedNames(first))
	}
}

// TestNameClashMadeOnPurpose: a Thing whose title is made to read like
// another's tagged name (tags are of public ids) takes no tool from it:
// every tool keeps a name of its own, the same at every reading.
func TestNameClashMadeOnPurpose(t *testing.T) {
	build := func() map[string]*entry {
		mk := func(title string) *entry {
			return &entry{title: title, slug: slug(title, true), actions: []string{"on"}}
		}
		return map[string]*entry{
			"urn:a": mk("Lamp"),
			"urn:b": mk("Lamp"),
			"urn:c": mk("lamp " + tag("urn:a")), // reads as urn:a's tagged name
		}
	}
	first := nameAll(build(), nil)
	if len(first) != 3 {
		t.Fatalf("%d names for 3 tools: %v", len(first), sortedNames(first))
	}
	things := map[string]bool{}
	for n, r := range first {
		things[r.thing] = true
		if !validName(n) {
			t.Errorf("bad name %q", n)
		}
	}
	if len(things) != 3 {
		t.Errorf("a Thing lost its tool: %v", sortedNames(first))
	}
	for range 20 {
		if again := nameAll(build(), nil); strings.Join(sortedNames(again), " ") != strings.Join(sortedNames(first), " ") {
			t.Fatalf("names changed: %v vs %v", sortedNames(again), sortedNames(first))
		}
	}
}
