package dnssd

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// EventKind says what happened to a browsed instance.
type EventKind int

// Event kinds.
const (
	// Added: an instance became complete (SRV, TXT and an address known).
	Added EventKind = iota
	// Updated: its TXT, host, port, addresses or interface changed.
	Updated
	// Removed: a goodbye, or its records expired unrefreshed.
	Removed
	// Seen: a re-announcement or answer refreshed it, unchanged.
	Seen
)

func (k EventKind) String() string {
	return [...]string{"added", "updated", "removed", "seen"}[k]
}

// Entry is a browsed service instance.
type Entry struct {
	Instance string // unescaped instance name
	Service  string // "_wot._tcp"
	Host     string // SRV target, "host.local."
	Port     int
	Text     []string // TXT strings in the order received
	IPs      []net.IP // IPv4 first
	Iface    string
	// Subtypes browsed that hold this instance, e.g. "_directory".
	Subtypes []string
}

// TXT returns the TXT record as keys (lower case) and values.
func (e Entry) TXT() map[string]string { return parseTXT(e.Text) }

// Key identifies the instance: its full name in lower case.
func (e Entry) Key() string {
	return strings.ToLower(escapeLabel(e.Instance) + "." + serviceName(e.Service))
}

func (e Entry) equal(o Entry) bool {
	return e.Host == o.Host && e.Port == o.Port && e.Iface == o.Iface &&
		slices.Equal(e.Text, o.Text) && slices.Equal(e.Subtypes, o.Subtypes) &&
		slices.EqualFunc(e.IPs, o.IPs, net.IP.Equal)
}

// Event is one change of a browsed instance.
type Event struct {
	Kind  EventKind
	Entry Entry
	// Reason of a removal: "goodbye" or "expired".
	Reason string
}

// BrowserConfig configures a Browser.
type BrowserConfig struct {
	// Types to browse, e.g. "_wot._tcp", "_directory._sub._wot._tcp".
	Types []string
	// Interfaces to browse on; empty: every LAN interface. Only the
	// Browse function uses it; Conn.Browse uses the Conn's.
	Interfaces []string
	// MaxRecords bounds the cache (default 4096); records beyond it are
	// dropped, so a flood costs bounded memory.
	MaxRecords int
	// OnEvent receives the events, in order, on the browser's goroutine:
	// it must not block.
	OnEvent func(Event)
	Logger  *slog.Logger
}

// maxCacheTTL caps the TTL of cached records (the longest a responder
// should use, RFC 6762 §10).
const maxCacheTTL = otherTTL

type cached struct {
	rr       dns.RR
	ifIndex  int
	received time.Time
	expires  time.Time
	// stage counts the refresh queries sent (at 80, 85, 90, 95 % of TTL).
	stage int
	// goodbye: a TTL 0 copy came; the record is held until expires, one
	// second later, unless announced again before (RFC 6762 §10.1).
	goodbye bool
}

// goodbyeHold is how long a record stays after its goodbye (RFC 6762
// §10.1): an answer sent just before the goodbye and arriving after it
// then refreshes the record instead of adding the instance back.
const goodbyeHold = time.Second

// Browser follows service instances on the LAN (RFC 6763 browsing with an
// RFC 6762 cache): it queries, caches what anyone announces or answers,
// re-queries records at 80–95 % of their TTL, and reports instances added,
// updated, seen and removed (by goodbye or expiry).
type Browser struct {
	cfg   BrowserConfig
	log   *slog.Logger
	conn  *Conn
	inbox chan packet
	types map[string]string // browsed name (lower) → subtype ("" for base types)
	bases map[string]bool   // base service names (lower), "_wot._tcp.local."

	records  map[string]*cached
	views    map[string]Entry
	goodbyes map[string]bool
	asked    map[string]time.Time
	dropped  int
	// holdUntil is the earliest end of a goodbye hold (zero: none), so
	// the run loop removes the instance then rather than at its next tick.
	holdUntil time.Time

	mu       sync.Mutex // guards snapshot
	snapshot []Entry

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Browse opens a Conn on cfg.Interfaces and browses on it (see
// Conn.Browse); closing the Browser closes the Conn.
func Browse(cfg BrowserConfig) (*Browser, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c, err := Listen(cfg.Interfaces, cfg.Logger)
	if err != nil {
		return nil, err
	}
	if len(c.Interfaces()) == 0 {
		cfg.Logger.Warn("no network interface to browse on", "interfaces", cfg.Interfaces)
	}
	b, err := c.Browse(cfg)
	if err != nil {
		c.close()
		return nil, err
	}
	return b, nil
}

// Browse starts browsing on c, which it shares. cfg.Interfaces is not
// used: the Browser follows the Conn's interfaces.
func (c *Conn) Browse(cfg BrowserConfig) (*Browser, error) {
	b, err := newBrowser(cfg)
	if err != nil {
		return nil, err
	}
	b.conn = c
	b.inbox = c.subscribe()
	go b.run()
	return b, nil
}

func newBrowser(cfg BrowserConfig) (*Browser, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRecords <= 0 {
		cfg.MaxRecords = 4096
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = func(Event) {}
	}
	b := &Browser{
		cfg: cfg, log: cfg.Logger,
		types: map[string]string{}, bases: map[string]bool{},
		records: map[string]*cached{}, views: map[string]Entry{},
		goodbyes: map[string]bool{}, asked: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, t := range cfg.Types {
		name := strings.ToLower(serviceName(t))
		sub, base, ok := strings.Cut(name, "._sub.")
		if ok {
			b.types[name] = sub
		} else {
			base = name
			b.types[name] = ""
		}
		b.bases[base] = true
	}
	if len(b.types) == 0 {
		return nil, fmt.Errorf("cannot browse: no service type given")
	}
	return b, nil
}

// Entries returns the instances known now.
func (b *Browser) Entries() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.snapshot)
}

// Close stops browsing.
func (b *Browser) Close() error {
	b.once.Do(func() {
		close(b.stop)
		<-b.done
		b.conn.release(b.inbox)
	})
	return nil
}

func (b *Browser) run() {
	defer close(b.done)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	sig := signature(b.conn.Interfaces())
	// Browse queries at 0, 1, 3, 7 … s, doubling up to an hour (RFC 6762 §5.2).
	next, gap := time.Now(), time.Second
	// hold fires when the earliest goodbye hold ends: the tick alone
	// would add up to 250 ms to it.
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	armed := time.Time{}
	for {
		select {
		case <-b.stop:
			return
		case p := <-b.inbox:
			b.handle(p, time.Now())
		case now := <-hold.C:
			armed = time.Time{}
			b.maintain(now)
		case now := <-tick.C:
			if !now.Before(next) {
				b.query()
				next, gap = now.Add(gap), min(2*gap, time.Hour)
			}
			b.maintain(now)
		case <-poll.C:
			ifs, err := selectInterfaces(b.conn.names)
			if err == nil {
				if s := signature(ifs); s != sig {
					sig = s
					b.conn.setInterfaces(ifs)
					next, gap = time.Now(), time.Second
				}
			}
		}
		if !b.holdUntil.IsZero() && !b.holdUntil.Equal(armed) {
			armed = b.holdUntil
			hold.Reset(time.Until(armed))
		}
	}
}

// query asks for every browsed type on every interface.
func (b *Browser) query() {
	m := new(dns.Msg)
	for name := range b.types {
		m.Question = append(m.Question, dns.Question{Name: name, Qtype: dns.TypePTR, Qclass: dns.ClassINET})
	}
	b.conn.sendAll(m)
}

func recordKey(ifIndex int, rr dns.RR) string {
	return fmt.Sprintf("%d|%s|%d|%x", ifIndex, strings.ToLower(rr.Header().Name), rr.Header().Rrtype, rdata(rr))
}

// relevant reports whether rr belongs in the cache: PTRs of browsed types,
// SRV and TXT of their instances, and addresses (of hosts an SRV may name).
func (b *Browser) relevant(rr dns.RR) bool {
	name := strings.ToLower(rr.Header().Name)
	switch rr := rr.(type) {
	case *dns.PTR:
		_, ok := b.types[name]
		if !ok {
			return false
		}
		_, rest, err := splitFirstLabel(strings.ToLower(rr.Ptr))
		return err == nil && b.bases[rest]
	case *dns.SRV, *dns.TXT:
		_, rest, err := splitFirstLabel(name)
		return err == nil && b.bases[rest]
	case *dns.A, *dns.AAAA:
		return true
	}
	return false
}

// handle caches the records of a response and reports what changed.
func (b *Browser) handle(p packet, now time.Time) {
	if !p.msg.Response {
		return
	}
	changed := false
	inPacket := map[string]bool{}
	flush := map[flushKey]bool{}
	seen := map[string]bool{}
	evicted := false
	for _, rr := range append(p.msg.Answer[:len(p.msg.Answer):len(p.msg.Answer)], p.msg.Extra...) {
		if !b.relevant(rr) {
			continue
		}
		h := rr.Header()
		key := recordKey(p.ifIndex, rr)
		if h.Ttl == 0 {
			// Goodbye (RFC 6762 §10.1): kept one more second, then gone;
			// no refresh queries for it meanwhile.
			if c, ok := b.records[key]; ok && !c.goodbye {
				c.goodbye, c.stage = true, 4
				c.expires = now.Add(goodbyeHold)
				if b.holdUntil.IsZero() || c.expires.Before(b.holdUntil) {
					b.holdUntil = c.expires
				}
			}
			continue
		}
		inPacket[key] = true
		if h.Class&(1<<15) != 0 {
			flush[flushKey{p.ifIndex, strings.ToLower(h.Name), h.Rrtype}] = true
		}
		// TTLs are capped, so hostile records cannot stay for years.
		h.Ttl = min(h.Ttl, maxCacheTTL)
		exp := now.Add(time.Duration(h.Ttl) * time.Second)
		if c, ok := b.records[key]; ok {
			// A fresh answer also cancels a pending goodbye.
			c.received, c.expires, c.stage, c.goodbye = now, exp, 0, false
			c.rr = rr
			switch rr := rr.(type) {
			case *dns.PTR:
				seen[strings.ToLower(rr.Ptr)] = true
			case *dns.SRV:
				seen[strings.ToLower(h.Name)] = true
			}
			continue
		}
		if len(b.records) >= b.cfg.MaxRecords {
			// Evicting scans the cache: at most once per packet.
			if !evicted {
				evicted = true
				b.evict()
			}
			if len(b.records) >= b.cfg.MaxRecords {
				b.dropped++
				if b.dropped%1000 == 1 {
					b.log.Warn("mdns cache full; records dropped", "max", b.cfg.MaxRecords, "dropped", b.dropped)
				}
				continue
			}
		}
		b.records[key] = &cached{rr: rr, ifIndex: p.ifIndex, received: now, expires: exp}
		changed = true
	}
	if b.flush(flush, inPacket) {
		changed = true
	}
	if changed {
		b.update(now)
	}
	for inst := range seen {
		if e, ok := b.views[inst]; ok {
			b.cfg.OnEvent(Event{Kind: Seen, Entry: e})
		}
	}
}

// flushKey is a record set: the records of one name and type on one
// interface.
type flushKey struct {
	ifIndex int
	name    string
	typ     uint16
}

// flush drops the cached records of the sets a packet flushed, except
// those it carried (keys in inPacket): a unique record with the
// cache-flush bit replaces the others of its name and type on that
// interface (RFC 6762 §10.2), so a new TXT or address wins at once. It
// reports whether any record was dropped.
func (b *Browser) flush(sets map[flushKey]bool, inPacket map[string]bool) bool {
	if len(sets) == 0 {
		return false
	}
	dropped := false
	for key, c := range b.records {
		h := c.rr.Header()
		if sets[flushKey{c.ifIndex, strings.ToLower(h.Name), h.Rrtype}] && !inPacket[key] {
			delete(b.records, key)
			dropped = true
		}
	}
	return dropped
}

// evict drops addresses no SRV names, to make room.
func (b *Browser) evict() {
	targets := map[string]bool{}
	for _, c := range b.records {
		if srv, ok := c.rr.(*dns.SRV); ok {
			targets[strings.ToLower(srv.Target)] = true
		}
	}
	for key, c := range b.records {
		switch c.rr.(type) {
		case *dns.A, *dns.AAAA:
			if !targets[strings.ToLower(c.rr.Header().Name)] {
				delete(b.records, key)
			}
		}
	}
}

// maintain expires records, sends refresh queries for instances in use at
// 80, 85, 90 and 95 % of their TTL, and asks for what incomplete instances
// lack.
func (b *Browser) maintain(now time.Time) {
	changed := false
	ask := map[int][]dns.Question{}
	b.holdUntil = time.Time{}
	for key, c := range b.records {
		if !now.Before(c.expires) {
			delete(b.records, key)
			changed = true
			if c.goodbye {
				// The removal is reported as a goodbye, not an expiry.
				if ptr, ok := c.rr.(*dns.PTR); ok {
					b.goodbyes[strings.ToLower(ptr.Ptr)] = true
				}
				if _, ok := c.rr.(*dns.SRV); ok {
					b.goodbyes[strings.ToLower(c.rr.Header().Name)] = true
				}
			}
			continue
		}
		if c.goodbye && (b.holdUntil.IsZero() || c.expires.Before(b.holdUntil)) {
			b.holdUntil = c.expires
		}
		ttl := time.Duration(c.rr.Header().Ttl) * time.Second
		age := now.Sub(c.received)
		if c.stage < 4 && age >= ttl*time.Duration(80+5*c.stage)/100 {
			c.stage++
			if b.inUse(c.rr) {
				h := c.rr.Header()
				ask[c.ifIndex] = append(ask[c.ifIndex], dns.Question{Name: h.Name, Qtype: h.Rrtype, Qclass: dns.ClassINET})
			}
		}
	}
	if changed {
		b.update(now)
	}
	b.askMissing(now, ask)
	if b.conn == nil {
		return
	}
	for ifIndex, qs := range ask {
		ifi := b.conn.selected(ifIndex)
		if ifi == nil {
			continue
		}
		m := new(dns.Msg)
		m.Question = dedupQuestions(qs)
		if err := b.conn.send(m, ifi); err != nil {
			b.log.Debug("cannot send refresh query", "err", err)
		}
	}
	if len(b.asked) > 4096 {
		clear(b.asked)
	}
}

func dedupQuestions(qs []dns.Question) []dns.Question {
	seen := map[dns.Question]bool{}
	var out []dns.Question
	for _, q := range qs {
		q.Name = strings.ToLower(q.Name)
		if !seen[q] && len(out) < 64 {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}

// inUse reports whether rr is part of a reported instance.
func (b *Browser) inUse(rr dns.RR) bool {
	name := strings.ToLower(rr.Header().Name)
	switch rr := rr.(type) {
	case *dns.PTR:
		_, ok := b.views[strings.ToLower(rr.Ptr)]
		return ok
	case *dns.SRV, *dns.TXT:
		_, ok := b.views[name]
		return ok
	default:
		for _, e := range b.views {
			if strings.EqualFold(e.Host, name) {
				return true
			}
		}
	}
	return false
}

// askMissing queries, at most once a second per name, the SRV and TXT of
// instances known by PTR only, and the addresses of SRV targets.
func (b *Browser) askMissing(now time.Time, ask map[int][]dns.Question) {
	type nameType struct {
		ifIndex int
		name    string
		typ     uint16
	}
	have := make(map[nameType]bool, len(b.records))
	for _, c := range b.records {
		h := c.rr.Header()
		have[nameType{c.ifIndex, strings.ToLower(h.Name), h.Rrtype}] = true
	}
	for _, c := range b.records {
		var q dns.Question
		switch rr := c.rr.(type) {
		case *dns.PTR:
			inst := strings.ToLower(rr.Ptr)
			if _, ok := b.views[inst]; ok || (have[nameType{c.ifIndex, inst, dns.TypeSRV}] && have[nameType{c.ifIndex, inst, dns.TypeTXT}]) {
				continue
			}
			q = dns.Question{Name: inst, Qtype: dns.TypeANY, Qclass: dns.ClassINET}
		case *dns.SRV:
			t := strings.ToLower(rr.Target)
			if have[nameType{c.ifIndex, t, dns.TypeA}] || have[nameType{c.ifIndex, t, dns.TypeAAAA}] {
				continue
			}
			q = dns.Question{Name: t, Qtype: dns.TypeANY, Qclass: dns.ClassINET}
		default:
			continue
		}
		k := fmt.Sprint(c.ifIndex, q.Name)
		if now.Sub(b.asked[k]) < time.Second {
			continue
		}
		b.asked[k] = now
		ask[c.ifIndex] = append(ask[c.ifIndex], q)
	}
}

// update recomputes the instances from the cache and reports the
// differences.
func (b *Browser) update(now time.Time) {
	views := b.instances()
	old := b.views
	b.views = views
	for k, e := range views {
		o, ok := old[k]
		switch {
		case !ok:
			delete(b.goodbyes, k)
			b.cfg.OnEvent(Event{Kind: Added, Entry: e})
		case !o.equal(e):
			b.cfg.OnEvent(Event{Kind: Updated, Entry: e})
		}
	}
	for k, o := range old {
		if _, ok := views[k]; !ok {
			reason := "expired"
			if b.goodbyes[k] {
				reason = "goodbye"
			}
			delete(b.goodbyes, k)
			b.cfg.OnEvent(Event{Kind: Removed, Entry: o, Reason: reason})
		}
	}
	if len(b.goodbyes) > 4096 {
		clear(b.goodbyes)
	}
	snap := make([]Entry, 0, len(views))
	for _, e := range views {
		snap = append(snap, e)
	}
	slices.SortFunc(snap, func(a, c Entry) int { return strings.Compare(a.Key(), c.Key()) })
	b.mu.Lock()
	b.snapshot = snap
	b.mu.Unlock()
}

// nameOn is a record name (lower case) as cached on one interface.
type nameOn struct {
	ifIndex int
	name    string
}

// ptrRef is where a PTR for an instance was cached, and for which browsed
// subtype ("" for the base type).
type ptrRef struct {
	ifIndex int
	subtype string
}

// cacheIndex is the cache indexed by name, built once per update: the
// latest SRV and TXT per name, the addresses per host name, and the PTRs
// per instance name.
type cacheIndex struct {
	srvs, txts map[nameOn]*cached
	addrs      map[nameOn][]net.IP
	ptrs       map[string][]ptrRef
}

func (b *Browser) index() cacheIndex {
	ix := cacheIndex{srvs: map[nameOn]*cached{}, txts: map[nameOn]*cached{},
		addrs: map[nameOn][]net.IP{}, ptrs: map[string][]ptrRef{}}
	for _, c := range b.records {
		name := strings.ToLower(c.rr.Header().Name)
		k := nameOn{c.ifIndex, name}
		switch rr := c.rr.(type) {
		case *dns.PTR:
			inst := strings.ToLower(rr.Ptr)
			ix.ptrs[inst] = append(ix.ptrs[inst], ptrRef{c.ifIndex, b.types[name]})
		case *dns.SRV:
			if o := ix.srvs[k]; o == nil || c.received.After(o.received) {
				ix.srvs[k] = c
			}
		case *dns.TXT:
			if o := ix.txts[k]; o == nil || c.received.After(o.received) {
				ix.txts[k] = c
			}
		case *dns.A:
			ix.addrs[k] = append(ix.addrs[k], rr.A)
		case *dns.AAAA:
			ix.addrs[k] = append(ix.addrs[k], rr.AAAA)
		}
	}
	return ix
}

// instances builds the complete instances (PTR, SRV, TXT and an address
// on one interface) from the cache, by instance key.
func (b *Browser) instances() map[string]Entry {
	ix := b.index()
	views := map[string]Entry{}
	for inst, refs := range ix.ptrs {
		label, rest, err := splitFirstLabel(inst)
		if err != nil {
			continue
		}
		var best *Entry
		var bestAt time.Time
		var bestSticky bool
		var subtypes []string
		for _, r := range refs {
			if r.subtype != "" && !slices.Contains(subtypes, r.subtype) {
				subtypes = append(subtypes, r.subtype)
			}
			srv, txt := ix.srvs[nameOn{r.ifIndex, inst}], ix.txts[nameOn{r.ifIndex, inst}]
			if srv == nil || txt == nil {
				continue
			}
			target := strings.ToLower(srv.rr.(*dns.SRV).Target)
			ips := ix.addrs[nameOn{r.ifIndex, target}]
			if len(ips) == 0 {
				continue
			}
			ifName := fmt.Sprint(r.ifIndex)
			if b.conn != nil {
				if ifi := b.conn.selected(r.ifIndex); ifi != nil {
					ifName = ifi.Name
				}
			}
			// On a host seen on several interfaces, keep the interface
			// reported before while it stays complete: alternating would
			// report an update (and make the hub fetch) at every
			// announcement. Otherwise the latest SRV wins.
			o, had := b.views[inst]
			sticky := had && o.Iface == ifName
			if best != nil && !sticky && (bestSticky || !srv.received.After(bestAt)) {
				continue
			}
			// The instance label keeps its case from the SRV owner name.
			if l, _, err := splitFirstLabel(srv.rr.Header().Name); err == nil {
				label = l
			}
			e := Entry{
				Instance: label,
				Service:  strings.TrimSuffix(rest, "."+domain),
				Host:     srv.rr.(*dns.SRV).Target,
				Port:     int(srv.rr.(*dns.SRV).Port),
				Text:     txt.rr.(*dns.TXT).Txt,
				IPs:      sortIPs(ips),
				Iface:    ifName,
			}
			best, bestAt, bestSticky = &e, srv.received, sticky
		}
		if best != nil {
			slices.Sort(subtypes)
			best.Subtypes = subtypes
			views[inst] = *best
		}
	}
	return views
}

// sortIPs orders addresses IPv4 first, then by value, without duplicates.
func sortIPs(ips []net.IP) []net.IP {
	out := slices.Clone(ips)
	slices.SortFunc(out, func(a, c net.IP) int {
		a4, c4 := a.To4() != nil, c.To4() != nil
		if a4 != c4 {
			if a4 {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.To16()), string(c.To16()))
	})
	return slices.CompactFunc(out, net.IP.Equal)
}
