package mqtt

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// A group-action topic is exactly lmos/v1/hub/groups/{gid}/actions/{name}
// with one wildcard-free level each; only those may be published (the
// policy then decides as for an invocation).
func TestGroupActionTopic(t *testing.T) {
	for _, c := range []struct {
		topic       string
		gid, action string
	}{
		{lmos.GroupActionTopic("home", "setTarget"), "home", "setTarget"},
		{"lmos/v1/hub/groups/a.b-c_d/actions/x", "a.b-c_d", "x"},
		{"lmos/v1/hub/groups/home/actions/setTarget/more", "", ""},
		{"lmos/v1/hub/groups/home/actions/", "", ""},
		{"lmos/v1/hub/groups//actions/x", "", ""},
		{"lmos/v1/hub/groups/+/actions/x", "", ""},
		{"lmos/v1/hub/groups/home/actions/#", "", ""},
		{"lmos/v1/hub/groups/home/events/x", "", ""},
		{"lmos/v1/hub/groups/home", "", ""},
		{"lmos/v1/groups/home/actions/x", "", ""},
		{"lmos/v1/hub/status", "", ""},
	} {
		gid, action, ok := groupActionOf(c.topic)
		if ok != (c.gid != "") || gid != c.gid || action != c.action {
			t.Errorf("groupActionOf(%q) = %q, %q, %v", c.topic, gid, action, ok)
		}
		if got := mayPublish("", c.topic); got != ok {
			t.Errorf("mayPublish(%q) = %v", c.topic, got)
		}
		if op, _, governedOK := governed(c.topic, true); ok && (!governedOK || op != "invokeaction") {
			t.Errorf("governed(%q) = %q, %v: want an invocation", c.topic, op, governedOK)
		}
	}
}

func FuzzGroupActionTopic(f *testing.F) {
	for _, s := range []string{lmos.GroupActionTopic("g", "a"), "lmos/v1/hub/groups/g/actions/a/b", "lmos/v1/hub/groups/+/actions/#", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		gid, action, ok := groupActionOf(topic)
		if !ok {
			return
		}
		if gid == "" || action == "" || strings.ContainsAny(gid+action, "/+#") || lmos.GroupActionTopic(gid, action) != topic {
			t.Fatalf("groupActionOf(%q) = %q, %q", topic, gid, action)
		}
	})
}
