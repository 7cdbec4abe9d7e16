package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/bridge"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/mqtt"
)

// BridgeConfig is the MQTT bridge to an upstream broker (PROTOCOL §9): off
// while url is empty.
type BridgeConfig struct {
	URL         string       `yaml:"url"`         // mqtt://, mqtts://, ws:// or wss://host:port; "" = no bridge
	Name        string       `yaml:"name"`        // default "upstream": the state topic and the link's name
	ClientID    string       `yaml:"clientId"`    // default "lmos-hub-<hub.name>"
	Username    string       `yaml:"username"`    // upstream credentials
	Password    string       `yaml:"password"`    //
	CAFile      string       `yaml:"caFile"`      // PEM CAs for mqtts/wss; default the system's
	Fingerprint string       `yaml:"fingerprint"` // pins the upstream's certificate (sha256:…) instead
	KeepAlive   Duration     `yaml:"keepAlive"`   // default 30s
	RetryMin    Duration     `yaml:"retryMin"`    // reconnect delay, drawn between retryMin and a bound doubling up to retryMax; default 1s
	RetryMax    Duration     `yaml:"retryMax"`    // default 2m
	Session     Duration     `yaml:"sessionExpiry"`
	MaxQueued   int          `yaml:"maxQueued"`   // QoS 1/2 messages kept while the uplink is down, default 100000
	LocalAccess BridgeAccess `yaml:"localAccess"` // who may use the local side of the bridged topics
	Topics      BridgeTopics `yaml:"topics"`
}

// BridgeAccess says who may subscribe and publish on the local side of the
// bridged topics outside lmos/ (mqtt.BridgeNone, BridgeRead,
// BridgeOperate, BridgeAuthenticated).
type BridgeAccess struct {
	Subscribe string `yaml:"subscribe"` // default read: as events
	Publish   string `yaml:"publish"`   // default none: the bridge alone
}

// BridgeTopic is one bridged topic (bridge.Topic, mosquitto's semantics);
// Subscribe and Publish override localAccess for its local side.
type BridgeTopic struct {
	Pattern      string `yaml:"pattern"`
	Direction    string `yaml:"direction"` // in, out or both; default out
	QoS          int    `yaml:"qos"`
	LocalPrefix  string `yaml:"localPrefix"`
	RemotePrefix string `yaml:"remotePrefix"`
	Subscribe    string `yaml:"subscribe,omitempty"`
	Publish      string `yaml:"publish,omitempty"`
}

// BridgeTopics is the topics list. In an environment variable
// (LMOS_HUB_BRIDGE_TOPICS) it is written as mosquitto's topic lines
// separated by ";": `pattern [in|out|both [qos [local-prefix
// remote-prefix]]]`, "" for an empty prefix or pattern.
type BridgeTopics []BridgeTopic

// UnmarshalText reads the mosquitto-style form.
func (ts *BridgeTopics) UnmarshalText(b []byte) error {
	out := BridgeTopics{}
	for i, line := range strings.Split(string(b), ";") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) > 5 || len(f) == 4 {
			return fmt.Errorf("topic %d %q: want `pattern [in|out|both [qos [local-prefix remote-prefix]]]`", i+1, strings.TrimSpace(line))
		}
		for j := range f {
			if f[j] == `""` {
				f[j] = ""
			}
		}
		t := BridgeTopic{Pattern: f[0], Direction: bridge.Out}
		if len(f) > 1 {
			t.Direction = f[1]
		}
		if len(f) > 2 {
			q, err := strconv.Atoi(f[2])
			if err != nil {
				return fmt.Errorf("topic %d %q: qos %q is not 0, 1 or 2", i+1, strings.TrimSpace(line), f[2])
			}
			t.QoS = q
		}
		if len(f) == 5 {
			t.LocalPrefix, t.RemotePrefix = f[3], f[4]
		}
		out = append(out, t)
	}
	*ts = out
	return nil
}

func defaultBridgeConfig() BridgeConfig {
	return BridgeConfig{
		Name:        bridge.DefaultName,
		KeepAlive:   Duration(bridge.DefaultKeepAlive),
		RetryMin:    Duration(bridge.DefaultRetryMin),
		RetryMax:    Duration(bridge.DefaultRetryMax),
		Session:     Duration(bridge.DefaultSessionExpiry),
		MaxQueued:   bridge.DefaultMaxQueued,
		LocalAccess: BridgeAccess{Subscribe: mqtt.BridgeRead, Publish: mqtt.BridgeNone},
		Topics:      BridgeTopics{},
	}
}

// redacted hides the password and copies the topics.
func (c BridgeConfig) redacted() BridgeConfig {
	if c.Password != "" {
		c.Password = "<redacted>"
	}
	c.Topics = slices.Clone(c.Topics)
	return c
}

// bridgeConfig is the bridge package's configuration; clientID defaults
// to lmos-hub-<hub name>.
func (c Config) bridgeConfig() bridge.Config {
	b := c.Bridge
	cfg := bridge.Config{
		Name: b.Name, URL: b.URL, ClientID: b.ClientID, Username: b.Username, Password: b.Password,
		CAFile: b.CAFile, Fingerprint: b.Fingerprint, KeepAlive: time.Duration(b.KeepAlive),
		RetryMin: time.Duration(b.RetryMin), RetryMax: time.Duration(b.RetryMax),
		SessionExpiry: time.Duration(b.Session), MaxQueued: b.MaxQueued,
		QueueDir: filepath.Join(c.DataDir, "bridge-queue", b.Name),
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "lmos-hub-" + c.Hub.Name
	}
	for _, t := range b.Topics {
		cfg.Topics = append(cfg.Topics, bridge.Topic{Pattern: t.Pattern, Direction: t.Direction, QoS: byte(min(max(t.QoS, 0), 255)),
			LocalPrefix: t.LocalPrefix, RemotePrefix: t.RemotePrefix})
	}
	return cfg
}

// bridgedAreas are the local sides of the bridged topics outside lmos/
// for the broker's ACL, each with who may use it.
func (c Config) bridgedAreas() []mqtt.BridgedArea {
	if c.Bridge.URL == "" {
		return nil
	}
	var out []mqtt.BridgedArea
	for _, t := range c.Bridge.Topics {
		f := t.LocalPrefix + t.Pattern
		if !bridge.Outside(f) {
			continue
		}
		a := mqtt.BridgedArea{Filter: f, Subscribe: c.Bridge.LocalAccess.Subscribe, Publish: c.Bridge.LocalAccess.Publish}
		if t.Subscribe != "" {
			a.Subscribe = t.Subscribe
		}
		if t.Publish != "" {
			a.Publish = t.Publish
		}
		out = append(out, a)
	}
	return out
}

// validateBridge checks the bridge section when a url is set.
func (c Config) validateBridge(bad func(string, error)) {
	b := c.Bridge
	bad("bridge.localAccess.subscribe", checkOneOf(b.LocalAccess.Subscribe, mqtt.BridgeAccessLevels))
	bad("bridge.localAccess.publish", checkOneOf(b.LocalAccess.Publish, mqtt.BridgeAccessLevels))
	for i, t := range b.Topics {
		if t.Subscribe != "" {
			bad(fmt.Sprintf("bridge.topics[%d].subscribe", i), checkOneOf(t.Subscribe, mqtt.BridgeAccessLevels))
		}
		if t.Publish != "" {
			bad(fmt.Sprintf("bridge.topics[%d].publish", i), checkOneOf(t.Publish, mqtt.BridgeAccessLevels))
		}
		if t.QoS < 0 || t.QoS > 2 {
			bad(fmt.Sprintf("bridge.topics[%d].qos", i), fmt.Errorf("must be 0, 1 or 2 (got %d)", t.QoS))
		}
	}
	if b.MaxQueued < 1 {
		bad("bridge.maxQueued", fmt.Errorf("must be at least 1 (got %d)", b.MaxQueued))
	}
	if b.URL == "" {
		return
	}
	cfg := c.bridgeConfig()
	if err := cfg.Validate(); err != nil {
		var se *bridge.SettingError
		if errors.As(err, &se) {
			bad("bridge."+se.Setting, se.Err)
		} else {
			bad("bridge", err)
		}
	}
}

// openBridge starts the MQTT bridge when bridge.url is set; the broker
// serves already. Main.Bridge reports its state (hub.LinkState).
func (m *Main) openBridge(context.Context) error {
	if m.Config.Bridge.URL == "" {
		return nil
	}
	cfg := m.Config.bridgeConfig()
	cfg.Logger = m.Logger
	b, err := bridge.New(cfg, m.Broker.BridgePort())
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	m.Bridge = b
	m.addLinks(m.BridgeStates)
	m.onClose("bridge", b.Close)
	return nil
}

// BridgeStates is the bridge's link for /api/status, /metrics and the
// dashboard (none while bridge.url is empty).
func (m *Main) BridgeStates() []hub.LinkState {
	if m.Bridge == nil {
		return nil
	}
	return []hub.LinkState{m.Bridge.State()}
}
