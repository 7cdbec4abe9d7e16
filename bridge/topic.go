package bridge

import (
	"fmt"
	"strings"
)

// Directions of a bridged topic, with mosquitto's meaning (mosquitto.conf,
// "topic pattern [[[ out | in | both ] qos-level] local-prefix
// remote-prefix]").
const (
	In   = "in"   // upstream → local
	Out  = "out"  // local → upstream (mosquitto's default)
	Both = "both" // each way; a message crosses once
)

// Topic is one bridged topic pattern, as mosquitto's `topic` line: the
// pattern (wildcards allowed) is shared in Direction at QoS. For incoming
// topics the bridge subscribes upstream to RemotePrefix+Pattern and
// publishes what arrives locally with RemotePrefix replaced by
// LocalPrefix; for outgoing ones it subscribes locally to
// LocalPrefix+Pattern and publishes upstream with LocalPrefix replaced by
// RemotePrefix. An empty pattern with both prefixes set maps the single
// topic LocalPrefix to RemotePrefix.
type Topic struct {
	Pattern      string
	Direction    string // In, Out or Both; "" is Out
	QoS          byte   // 0, 1 or 2; the subscription's QoS on either side
	LocalPrefix  string
	RemotePrefix string
}

// LocalFilter is the filter of the topic on the local broker.
func (t Topic) LocalFilter() string { return t.LocalPrefix + t.Pattern }

// RemoteFilter is the filter of the topic on the upstream broker.
func (t Topic) RemoteFilter() string { return t.RemotePrefix + t.Pattern }

func (t Topic) in() bool  { return t.Direction == In || t.Direction == Both }
func (t Topic) out() bool { return t.Direction == Out || t.Direction == Both || t.Direction == "" }

// toRemote maps a local topic name the topic's local filter matched.
func (t Topic) toRemote(local string) string {
	return t.RemotePrefix + strings.TrimPrefix(local, t.LocalPrefix)
}

// toLocal maps an upstream topic name the topic's remote filter matched.
func (t Topic) toLocal(remote string) string {
	return t.LocalPrefix + strings.TrimPrefix(remote, t.RemotePrefix)
}

// validate checks t as mosquitto does (its table of valid prefix
// combinations) and keeps incoming messages out of the hub's own topics:
// what comes in lands where the bridge's ACL rules decide (PROTOCOL §9),
// never on lmos/ (joins, presence, invocations) or $ topics.
func (t Topic) validate() error {
	switch t.Direction {
	case In, Out, Both, "":
	default:
		return fmt.Errorf("direction %q is not in, out or both", t.Direction)
	}
	if t.QoS > 2 {
		return fmt.Errorf("qos %d is not 0, 1 or 2", t.QoS)
	}
	if strings.ContainsAny(t.LocalPrefix+t.RemotePrefix, "+#") {
		return fmt.Errorf("prefixes %q and %q must not contain wildcards", t.LocalPrefix, t.RemotePrefix)
	}
	if t.Pattern == "" && (t.LocalPrefix == "" || t.RemotePrefix == "") {
		// mosquitto: an empty pattern remaps one topic; both ends needed.
		return fmt.Errorf("an empty pattern needs both localPrefix and remotePrefix (it maps the one topic localPrefix to remotePrefix)")
	}
	if !validFilter(t.LocalFilter()) || !validFilter(t.RemoteFilter()) {
		return fmt.Errorf("pattern %q with prefixes %q and %q is not a valid topic filter", t.Pattern, t.LocalPrefix, t.RemotePrefix)
	}
	if t.in() && !Outside(t.LocalFilter()) {
		return fmt.Errorf("incoming messages would land on %q: the local side of an in or both topic must begin with a level of its own (no wildcard), not lmos/ and not $", t.LocalFilter())
	}
	return nil
}

// Outside reports whether every topic filter matches lies outside the
// hub's own tree (lmos/) and the $ topics: its first level is a literal
// that is neither "lmos" nor begins with "$". Only such local filters are
// areas of the bridge's ACL rules.
func Outside(filter string) bool {
	first, _, _ := strings.Cut(filter, "/")
	return first != "" && first != "lmos" && !strings.HasPrefix(first, "$") && !strings.ContainsAny(first, "+#")
}

// validFilter reports whether f is a valid MQTT topic filter.
func validFilter(f string) bool {
	if f == "" || strings.ContainsRune(f, 0) {
		return false
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return false
		case l != "#" && l != "+" && strings.ContainsAny(l, "+#"):
			return false
		}
	}
	return true
}
