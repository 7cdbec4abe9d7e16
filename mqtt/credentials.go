package mqtt

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// The membership-credential inbox (PROTOCOL §4.1, §7):
// lmos/v1/things/{tid}/credentials/{gid}, hub → that Thing only. The hub
// publishes a new member's credential there (QoS 1, so a persistent
// session keeps it while the agent is away) and an empty message when the
// membership ends, and gives a subscriber, after
// its SUBACK, the current credential of each of its memberships its filter
// matches as a retained message read from the registry, as it does the
// descriptions on …/td: the broker stores no copy.

// credentialQueue bounds the memberships waiting to be published; one
// group write may add up to hub.MaxGroupMembers at once.
const credentialQueue = 4 * hub.MaxGroupMembers

// credentialInbox carries membership changes from the registry's write
// loop (which must not block) to the publisher.
type credentialInbox struct {
	q chan hub.MembershipChange
	// dropped counts memberships not published because the queue was full
	// (the member still gets its credential on subscribe or over HTTP).
	dropped atomic.Uint64
}

// startCredentials follows the registry's membership changes until the
// broker stops.
func (b *Broker) startCredentials() {
	b.credInbox.q = make(chan hub.MembershipChange, credentialQueue)
	b.reg.OnMembershipChange(func(c hub.MembershipChange) {
		select {
		case b.credInbox.q <- c:
		default:
			b.credInbox.dropped.Add(1)
		}
	})
	b.events.Go(b.publishCredentials)
}

// publishCredentials publishes each added membership's credential to its
// Thing's inbox, and an empty message for an ended one; a change that a
// later one undid meanwhile is skipped.
func (b *Broker) publishCredentials() {
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.credInbox.q:
			topic := lmos.CredentialTopic(c.Thing, c.Group)
			if b.Subscribers(topic) == 0 {
				continue // nobody listens now; a later SUBSCRIBE gets it
			}
			var cred []byte // an ended membership: empty
			if c.Added {
				var err error
				if cred, err = b.reg.MemberCredential(c.Group, c.Thing); err != nil {
					continue // removed meanwhile, or no issuer
				}
			} else if b.reg.IsMember(c.Group, c.Thing) {
				continue // added again meanwhile
			}
			if err := b.publish(topic, cred, false, 1, vc.MediaType); err != nil {
				b.log.Warn("cannot publish a membership credential", "thing", c.Thing, "group", c.Group, "err", err)
			}
		}
	}
}

// credentialFilter reports whether filter may match the credential inbox
// of Thing tid (its own topic key) and the group level it names ("+" for
// any).
func credentialFilter(filter, tid string) (gid string, ok bool) {
	rest, ok := strings.CutPrefix(filter, lmos.ThingsPrefix+tid+"/credentials/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// isCredentialTopic reports a topic or filter (shared too) under some
// Thing's credential inbox.
func isCredentialTopic(topic string) bool {
	if shared, ok := strings.CutPrefix(topic, "$share/"); ok {
		_, topic, _ = strings.Cut(shared, "/")
	}
	tail, ok := strings.CutPrefix(topic, lmos.ThingsPrefix)
	if !ok {
		return false
	}
	_, rest, _ := strings.Cut(tail, "/")
	return rest == "credentials" || strings.HasPrefix(rest, "credentials/")
}

// queueCredentials queues, as retained messages after the SUBACK, the
// current credentials of cl's memberships that filter matches. Only the
// Thing itself may subscribe to its inbox (mayRead), so cl is it.
func (b *Broker) queueCredentials(h *binding, cl *mochi.Client, conn *outConn, filter string, granted byte, v5 bool, ids []int, now int64, t *tally) {
	tid := self(cl)
	if tid == "" || mochi.IsSharedFilter(filter) {
		return
	}
	level, ok := credentialFilter(filter, tid)
	if !ok {
		return
	}
	id, ok := idOf(tid)
	if !ok {
		return
	}
	for _, gid := range b.reg.GroupsOf(id) {
		if level != "+" && level != gid {
			continue
		}
		topic := lmos.CredentialTopic(id, gid)
		if !h.mayDeliver(cl, topic) {
			b.dropped[dropACL].Add(1)
			continue
		}
		cred, err := b.reg.MemberCredential(gid, id)
		if err != nil {
			continue
		}
		b.queueRetainedFromHub(cl, conn, topic, cred, vc.MediaType, granted, v5, ids, now, t)
	}
}

// writeCredentialMetrics writes the inbox's figures (/metrics).
func (b *Broker) writeCredentialMetrics(w io.Writer) {
	fmt.Fprintf(w, "# HELP lmos_mqtt_credentials_dropped_total Membership credentials not published to an inbox because too many were waiting (the member still gets them on subscribe).\n# TYPE lmos_mqtt_credentials_dropped_total counter\nlmos_mqtt_credentials_dropped_total %d\n", b.credInbox.dropped.Load())
}
