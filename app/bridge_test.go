package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/bridge"
	"github.com/eclipse-lmos/lmos-hub/mqtt"
)

// The bridge section from the environment (mosquitto's topic lines) and
// from YAML gives the same bridge, its areas for the ACL and its defaults.
func TestBridgeConfigEnvAndYAML(t *testing.T) {
	env := map[string]string{
		"LMOS_HUB_BRIDGE_URL":                   "mqtt://broker:1883",
		"LMOS_HUB_BRIDGE_TOPICS":                `things/+/events/# out 1 lmos/v1/ site-a/; # in 1 cloud/ commands/a/ ;"" both 0 loc/one rem/one`,
		"LMOS_HUB_BRIDGE_LOCALACCESS_PUBLISH":   "authenticated",
		"LMOS_HUB_BRIDGE_PASSWORD":              "s3cret",
		"LMOS_HUB_BRIDGE_LOCALACCESS_SUBSCRIBE": "read",
		"LMOS_HUB_HUB_NAME":                     "gw1",
	}
	fromEnv, err := LoadConfig(nil, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	yml := `hub: {name: gw1}
bridge:
  url: mqtt://broker:1883
  password: s3cret
  localAccess: {publish: authenticated}
  topics:
    - {pattern: "things/+/events/#", direction: out, qos: 1, localPrefix: lmos/v1/, remotePrefix: site-a/}
    - {pattern: "#", direction: in, qos: 1, localPrefix: cloud/, remotePrefix: commands/a/}
    - {pattern: "", direction: both, localPrefix: loc/one, remotePrefix: rem/one}
`
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	fromYAML, err := LoadConfig([]string{"--config", file}, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{"env": fromEnv, "yaml": fromYAML} {
		b := c.bridgeConfig()
		want := []bridge.Topic{
			{Pattern: "things/+/events/#", Direction: "out", QoS: 1, LocalPrefix: "lmos/v1/", RemotePrefix: "site-a/"},
			{Pattern: "#", Direction: "in", QoS: 1, LocalPrefix: "cloud/", RemotePrefix: "commands/a/"},
			{Pattern: "", Direction: "both", QoS: 0, LocalPrefix: "loc/one", RemotePrefix: "rem/one"},
		}
		if len(b.Topics) != len(want) {
			t.Fatalf("%s: topics %+v", name, b.Topics)
		}
		for i := range want {
			if b.Topics[i] != want[i] {
				t.Errorf("%s: topic %d = %+v, want %+v", name, i, b.Topics[i], want[i])
			}
		}
		if b.ClientID != "lmos-hub-gw1" || b.Name != "upstream" || b.QueueDir != filepath.Join(c.DataDir, "bridge-queue", "upstream") {
			t.Errorf("%s: %+v", name, b)
		}
		areas := c.bridgedAreas() // lmos/ is the ACL's own, not an area
		wantAreas := []mqtt.BridgedArea{{Filter: "cloud/#", Subscribe: "read", Publish: "authenticated"}, {Filter: "loc/one", Subscribe: "read", Publish: "authenticated"}}
		if len(areas) != 2 || areas[0] != wantAreas[0] || areas[1] != wantAreas[1] {
			t.Errorf("%s: areas %+v, want %+v", name, areas, wantAreas)
		}
		if r := c.Redacted(); r.Bridge.Password != "<redacted>" || c.Bridge.Password != "s3cret" {
			t.Errorf("%s: redacted password %q", name, r.Bridge.Password)
		}
	}
}

// A bridge configuration that is wrong names the setting, and the hub
// refuses to start with it.
func TestBridgeConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "http://x:1", "LMOS_HUB_BRIDGE_TOPICS": "a"}, "bridge.url"},
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "mqtt://x:1"}, "bridge.topics: is empty"},
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "mqtt://x:1", "LMOS_HUB_BRIDGE_TOPICS": "things/# in 1 lmos/v1/ up/"}, "bridge.topics[0]: incoming messages would land on \"lmos/v1/things/#\""},
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "mqtt://x:1", "LMOS_HUB_BRIDGE_TOPICS": "a out 1 x"}, "LMOS_HUB_BRIDGE_TOPICS"},
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "mqtt://x:1", "LMOS_HUB_BRIDGE_TOPICS": "a sideways"}, "bridge.topics[0]: direction \"sideways\""},
		{map[string]string{"LMOS_HUB_BRIDGE_URL": "mqtt://x:1", "LMOS_HUB_BRIDGE_TOPICS": "a out 3"}, "bridge.topics[0].qos"},
		{map[string]string{"LMOS_HUB_BRIDGE_LOCALACCESS_PUBLISH": "everyone"}, "bridge.localAccess.publish"},
	} {
		_, err := LoadConfig(nil, envMap(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.env, err, tc.want)
		}
	}
}
