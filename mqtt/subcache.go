package mqtt

import (
	"strings"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
)

// mochi's look-up of a topic's subscribers (TopicsIndex.Subscribers) walks
// the topic tree and builds fresh maps of every subscription for each
// publish: with one subscriber, about a tenth of the broker's CPU time per
// QoS 1 delivery and a quarter of its allocations. The fan-out keeps the
// result per topic instead, for as long as the topic index is unchanged.
//
// Validity is a generation counter, advanced by every hook that follows a
// change of the index's subscriptions: mochi changes them only in
//   - processSubscribe (SUBSCRIBE; also a repeated one with new options),
//     then OnSubscribed;
//   - processUnsubscribe (UNSUBSCRIBE), then OnUnsubscribed;
//   - UnsubscribeClient (a clean session ending, a clean start taking a
//     session over, anonymous.go), then OnUnsubscribed (or it changes
//     nothing: a session taken over);
//   - inheritClientSession (a session resumed: the same subscriptions
//     under the same client id), then OnSessionEstablished;
//   - Subscribe and Unsubscribe of inline subscriptions (the hub's own),
//     then OnSubscribed and OnUnsubscribed;
//   - loadSubscriptions, inside Serve: the counter advances after it.
// Session expiry removes no subscription from the index. A look-up reads
// the counter before the index and keeps its result under that value, so
// a result that may predate a change is never used after the change's
// hook has run. Those hooks run before mochi answers the packet (SUBACK,
// UNSUBACK, CONNACK), so a publish the client can order after its answer
// sees the change; and OnSubscribed advances it before it reads the
// retained store, so a publish that missed the new subscription was
// retained before that read (fanOut retains first) and reaches it that
// way, as with mochi's own look-up.
//
// Results with shared subscriptions are not kept: one member of each group
// is drawn per publish, in the result itself. Nothing else writes to a
// kept result; it is only read.

// The cache is bounded by the subscriptions it holds (each ~100 bytes
// with its map entry), not only by topics: a topic that a thousand
// wildcard subscriptions match would otherwise keep a thousand for each
// of its topics. It starts over when full; a result larger than a quarter
// of it is not kept (with many subscribers the deliveries cost far more
// than the look-up).
const (
	subsCacheTopics = 256
	subsCacheSubs   = 4096
)

type subsCache struct {
	gen  atomic.Uint64
	mu   sync.RWMutex
	m    map[string]subsEntry
	subs int // subscriptions held in m
}

type subsEntry struct {
	gen  uint64
	subs *mochi.Subscribers
	size int // 1 + its subscriptions
}

// changed invalidates every kept result (see above).
func (c *subsCache) changed() { c.gen.Add(1) }

// subscribers is mochi's Topics.Subscribers(topic), kept while valid. The
// result must not be changed unless it has shared subscriptions.
func (b *Broker) subscribers(topic string) *mochi.Subscribers {
	c := &b.subs
	gen := c.gen.Load()
	c.mu.RLock()
	e, ok := c.m[topic]
	c.mu.RUnlock()
	if ok && e.gen == gen {
		return e.subs
	}
	s := b.server.Topics.Subscribers(topic)
	n := 1 + len(s.Subscriptions) + len(s.InlineSubscriptions)
	if len(s.Shared) > 0 || n > subsCacheSubs/4 {
		return s
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]subsEntry)
	}
	old, kept := c.m[topic]
	if kept {
		c.subs -= old.size
	}
	if (!kept && len(c.m) >= subsCacheTopics) || c.subs+n > subsCacheSubs {
		clear(c.m)
		c.subs = 0
	}
	// mochi decodes a topic name without copying it: kept as the key, it
	// would pin the whole packet it came in (a reply of 1 MiB to a unique
	// reply topic, 256 of them: issue 24).
	c.m[strings.Clone(topic)] = subsEntry{gen, s, n}
	c.subs += n
	c.mu.Unlock()
	return s
}
