package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// TestMQTTJSGroupChannel: mqtt.js 5.16, MQTT 5 and 3.1.1, on a group
// channel of a hub started as main starts it (issue 15). The member is
// granted its channel and gets every one of the messages it published
// (QoS 0 and 1); a wildcard group level is refused to it (135 / 128); the
// other Thing, no member, is refused SUBSCRIBE (also $share) and PUBLISH
// (MQTT 5: PUBACK 0x87; 3.1.1 has no negative PUBACK: acknowledged and
// dropped) and gets nothing; neither client sees an error event, a
// server DISCONNECT or a close it did not ask for.
func TestMQTTJSGroupChannel(t *testing.T) {
	h := startHub(t, nil)
	member, other := "urn:e2e:grp:member", "urn:e2e:grp:other"
	creds := map[string][2]string{}
	for _, id := range []string{member, other} {
		c := h.MQTT(nil).MustJoin(lmos.TopicKey(id), tdgen.MakeTD(id, id))
		creds[id] = [2]string{c.Username, c.Password}
	}
	if _, err := h.Main.Registry.CreateGroup(context.Background(), hub.GroupSpec{ID: "js", Title: "js", Members: []string{member}}); err != nil {
		t.Fatal(err)
	}
	url := "mqtt://" + h.Main.MQTTAddr.String()
	for _, v := range []string{"5", "4"} {
		steps := runGroupsJS(t, url, v, "js", "40", creds[member][0], creds[member][1], creds[other][0], creds[other][1])
		refused := 135.0
		if v == "4" {
			refused = 128
		}
		code := func(step string) any { return steps[step]["code"] }
		if code("member-subscribe") != 1.0 {
			t.Errorf("v%s: member SUBACK %v, want 1", v, code("member-subscribe"))
		}
		for _, s := range []string{"member-wildcard-group", "other-subscribe", "other-shared"} {
			if code(s) != refused {
				t.Errorf("v%s: %s SUBACK %v, want %v", v, s, code(s), refused)
			}
		}
		if want := map[string]any{"5": 135.0, "4": 0.0}[v]; code("other-publish") != want {
			t.Errorf("v%s: non-member PUBACK %v, want %v", v, code("other-publish"), want)
		}
		r := steps["member-received"]
		if r["n"] != 40.0 || len(r["missing"].([]any)) != 0 || len(r["otherGot"].([]any)) != 0 || r["intruder"] != false {
			t.Errorf("v%s: %v", v, r)
		}
	}
}

// runGroupsJS runs test/interop/mqttjs-groups.mjs and returns its JSON
// lines by step (the last of each); a non-zero exit or no "done" line
// fails the test.
func runGroupsJS(t *testing.T, args ...string) map[string]map[string]any {
	t.Helper()
	lines := runMQTTJSScript(t, "mqttjs-groups.mjs", 30*time.Second, args...)
	if lines["done"] == nil {
		t.Fatalf("mqttjs-groups.mjs %v: no done line: %v", args, lines)
	}
	steps := map[string]map[string]any{}
	for step, ls := range lines {
		steps[step] = ls[len(ls)-1]
	}
	return steps
}
