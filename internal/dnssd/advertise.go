package dnssd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Default record TTLs (RFC 6762 §10): records naming a host 120 s, others
// 75 minutes.
const (
	hostTTL  = 120
	otherTTL = 4500
)

// Service is one DNS-SD service instance to advertise.
type Service struct {
	// Instance is the user-visible name ("Living room hub"); on a conflict
	// the advertiser renames it "Living room hub (2)".
	Instance string
	// Type is the service type, e.g. "_wot._tcp".
	Type string
	// Subtypes are announced as <subtype>._sub.<type>, e.g. "_directory".
	Subtypes []string
	Port     int
	// Text is the TXT record, "key=value" strings sent in this order.
	Text []string
}

// AdvertiserConfig configures an Advertiser.
type AdvertiserConfig struct {
	// Host is the host label (without .local); on a conflict it becomes
	// host-2, host-3 ….
	Host string
	// Interfaces to advertise on; empty: every LAN interface. Only the
	// Advertise function uses it; Conn.Advertise uses the Conn's.
	Interfaces []string
	// TTL overrides every record's TTL when positive (tests of expiry).
	TTL    uint32
	Logger *slog.Logger
}

// Advertiser announces services and answers queries for them: it probes
// for its names first and renames on conflicts, announces twice, answers
// queries, re-announces when the interfaces' addresses change, and sends
// goodbyes when closed.
type Advertiser struct {
	cfg   AdvertiserConfig
	log   *slog.Logger
	conn  *Conn
	inbox chan packet

	mu       sync.Mutex
	host     string
	services []Service
	renamed  chan struct{} // a conflict needs a new probe
	lastSent map[string]time.Time
	sig      string
	// announced holds each interface's addresses as last announced, so
	// goodbyes go out for those that left even when another user of the
	// shared conn refreshed its cache first.
	announced map[int][]net.IP
	// announcements counts the unsolicited announcements sent, one per
	// interface and round (Announcements).
	announcements atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Advertise opens a Conn on cfg.Interfaces and advertises services on it
// (see Conn.Advertise); closing the Advertiser closes the Conn.
func Advertise(ctx context.Context, cfg AdvertiserConfig, services ...Service) (*Advertiser, error) {
	if err := checkServices(services); err != nil {
		return nil, err
	}
	c, err := Listen(cfg.Interfaces, cfg.Logger)
	if err != nil {
		return nil, err
	}
	a, err := c.Advertise(ctx, cfg, services...)
	if err != nil {
		c.close()
		return nil, err
	}
	return a, nil
}

func checkServices(services []Service) error {
	for _, s := range services {
		if s.Instance == "" || s.Type == "" || s.Port <= 0 || s.Port > 65535 {
			return fmt.Errorf("cannot advertise %q (%s port %d): an instance name, a type and a port are needed", s.Instance, s.Type, s.Port)
		}
		if len(s.Instance) > 63 {
			return fmt.Errorf("cannot advertise %q: an instance name has at most 63 bytes", s.Instance)
		}
	}
	return nil
}

// Advertise probes for the names of services, announces them and keeps
// answering for them on c until Close. It returns once the names are
// settled and the first announcement is sent. cfg.Interfaces is not used:
// the Advertiser follows the Conn's interfaces.
func (c *Conn) Advertise(ctx context.Context, cfg AdvertiserConfig, services ...Service) (*Advertiser, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Host == "" {
		cfg.Host = "lmos"
	}
	if err := checkServices(services); err != nil {
		return nil, err
	}
	ifs := c.Interfaces()
	a := &Advertiser{
		cfg: cfg, log: cfg.Logger, conn: c, inbox: c.subscribe(),
		host:     HostLabel(cfg.Host),
		services: slices.Clone(services),
		renamed:  make(chan struct{}, 1),
		lastSent: map[string]time.Time{},
		sig:      signature(ifs),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	a.announced = a.currentAddrs()
	if len(ifs) == 0 {
		a.log.Warn("no network interface to advertise on", "interfaces", c.names)
	}
	if err := a.probe(ctx); err != nil {
		c.release(a.inbox)
		return nil, err
	}
	a.announce()
	go a.run()
	return a, nil
}

// Services returns the services as advertised now (names after renames).
func (a *Advertiser) Services() []Service {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.services)
}

// Host returns the host label in use.
func (a *Advertiser) Host() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.host
}

// SetText replaces the TXT record of the i-th service and announces it.
func (a *Advertiser) SetText(i int, text []string) {
	a.mu.Lock()
	if i >= 0 && i < len(a.services) {
		a.services[i].Text = slices.Clone(text)
	}
	a.mu.Unlock()
	a.announce()
}

// SetTexts replaces the TXT records of several services (index → text)
// and announces them together: announced one by one, the first
// announcement would still carry the others' old records, and the
// advertiser, hearing its own packet back, would take them for another
// host's and rename.
func (a *Advertiser) SetTexts(texts map[int][]string) {
	a.mu.Lock()
	for i, text := range texts {
		if i >= 0 && i < len(a.services) {
			a.services[i].Text = slices.Clone(text)
		}
	}
	a.mu.Unlock()
	a.announce()
}

func (a *Advertiser) ttl(def uint32) uint32 {
	if a.cfg.TTL > 0 {
		return a.cfg.TTL
	}
	return def
}

func (a *Advertiser) hostName() string { return a.host + "." + domain }

func instanceName(s Service) string {
	return escapeLabel(s.Instance) + "." + serviceName(s.Type)
}

// records returns every record of the advertiser on ifi (addresses are
// those of ifi); ttl 0 makes goodbyes. Unique records carry the
// cache-flush bit.
func (a *Advertiser) records(ifi *net.Interface, goodbye bool) []dns.RR {
	ttl := func(def uint32) uint32 {
		if goodbye {
			return 0
		}
		return a.ttl(def)
	}
	var rrs []dns.RR
	host := a.hostName()
	for _, s := range a.services {
		inst := instanceName(s)
		svc := serviceName(s.Type)
		rrs = append(rrs, &dns.PTR{Hdr: hdr(svc, dns.TypePTR, ttl(otherTTL), false), Ptr: inst})
		for _, st := range s.Subtypes {
			rrs = append(rrs, &dns.PTR{Hdr: hdr(st+"._sub."+svc, dns.TypePTR, ttl(otherTTL), false), Ptr: inst})
		}
		rrs = append(rrs, &dns.PTR{Hdr: hdr("_services._dns-sd._udp."+domain, dns.TypePTR, ttl(otherTTL), false), Ptr: svc})
		rrs = append(rrs, &dns.SRV{Hdr: hdr(inst, dns.TypeSRV, ttl(hostTTL), true), Port: uint16(s.Port), Target: host})
		txt := s.Text
		if len(txt) == 0 {
			txt = []string{""} // an empty TXT record holds one empty string (RFC 6763 §6.1)
		}
		rrs = append(rrs, &dns.TXT{Hdr: hdr(inst, dns.TypeTXT, ttl(otherTTL), true), Txt: txt})
	}
	if ifi != nil && a.conn != nil {
		v4, v6 := a.conn.addresses(ifi.Index)
		for _, ip := range v4 {
			rrs = append(rrs, &dns.A{Hdr: hdr(host, dns.TypeA, ttl(hostTTL), true), A: ip})
		}
		for _, ip := range v6 {
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(host, dns.TypeAAAA, ttl(hostTTL), true), AAAA: ip})
		}
	}
	return rrs
}

func hdr(name string, typ uint16, ttl uint32, unique bool) dns.RR_Header {
	class := uint16(dns.ClassINET)
	if unique {
		class |= 1 << 15 // cache flush (RFC 6762 §10.2)
	}
	return dns.RR_Header{Name: name, Rrtype: typ, Class: class, Ttl: ttl}
}

// uniqueNames are the names this advertiser alone may hold: its instances
// and its host.
func (a *Advertiser) uniqueNames() []string {
	names := []string{strings.ToLower(a.hostName())}
	for _, s := range a.services {
		names = append(names, strings.ToLower(instanceName(s)))
	}
	return names
}

// probe asks three times, 250 ms apart, whether anyone holds our names
// (RFC 6762 §8.1); a conflict renames and probes again, at most 15 times.
func (a *Advertiser) probe(ctx context.Context) error {
	for attempt := 0; attempt < 15; attempt++ {
		// A random delay first, so hosts switched on together do not probe
		// in lockstep.
		if err := sleep(ctx, time.Duration(rand.IntN(250))*time.Millisecond); err != nil {
			return err
		}
		conflict, err := a.probeOnce(ctx)
		if err != nil {
			return err
		}
		if !conflict {
			return nil
		}
	}
	return fmt.Errorf("cannot settle mdns names: still in conflict after 15 renames")
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probeOnce runs one probe round; it reports whether a name was renamed.
func (a *Advertiser) probeOnce(ctx context.Context) (bool, error) {
	for i := 0; i < 3; i++ {
		a.mu.Lock()
		for _, ifi := range a.conn.Interfaces() {
			m := new(dns.Msg)
			for _, n := range a.uniqueNames() {
				q := dns.Question{Name: n, Qtype: dns.TypeANY, Qclass: dns.ClassINET}
				if i == 0 {
					q.Qclass |= 1 << 15 // QU on the first probe
				}
				m.Question = append(m.Question, q)
			}
			for _, rr := range a.records(&ifi, false) {
				if rr.Header().Class&(1<<15) != 0 {
					rr = dns.Copy(rr)
					rr.Header().Class &^= 1 << 15
					m.Ns = append(m.Ns, rr)
				}
			}
			if err := a.conn.send(m, &ifi); err != nil {
				a.log.Debug("cannot send probe", "err", err)
			}
		}
		a.mu.Unlock()
		deadline := time.NewTimer(250 * time.Millisecond)
	wait:
		for {
			select {
			case p := <-a.inbox:
				if a.conflicts(p) {
					deadline.Stop()
					return true, nil
				}
			case <-deadline.C:
				break wait
			case <-ctx.Done():
				deadline.Stop()
				return false, ctx.Err()
			}
		}
	}
	return false, nil
}

// conflicts checks p for records that deny ours (another host answering
// for one of our names with other data, or probing for it and winning the
// tie-break, RFC 6762 §8.2); it renames what is in conflict.
func (a *Advertiser) conflicts(p packet) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ifi := a.conn.selected(p.ifIndex)
	if ifi == nil {
		return false
	}
	// Most packets name none of our names: skip them cheaply.
	names := a.uniqueNames()
	related := false
	for _, rr := range append(p.msg.Answer[:len(p.msg.Answer):len(p.msg.Answer)], p.msg.Ns...) {
		if slices.Contains(names, strings.ToLower(rr.Header().Name)) {
			related = true
			break
		}
	}
	if !related {
		return false
	}
	ours := a.records(ifi, false)
	renamed := false
	check := func(theirs []dns.RR, probing bool) {
		for _, name := range a.uniqueNames() {
			var mine, other []dns.RR
			for _, rr := range ours {
				if strings.EqualFold(rr.Header().Name, name) && rr.Header().Class&(1<<15) != 0 {
					mine = append(mine, rr)
				}
			}
			for _, rr := range theirs {
				if strings.EqualFold(rr.Header().Name, name) && rr.Header().Ttl > 0 {
					other = append(other, rr)
				}
			}
			if len(other) == 0 || len(mine) == 0 {
				continue
			}
			var lost bool
			if probing {
				lost = compareSets(mine, other) < 0
			} else {
				lost = !subset(other, mine)
			}
			if lost {
				a.rename(name)
				renamed = true
			}
		}
	}
	if p.msg.Response {
		check(p.msg.Answer, false)
	} else if len(p.msg.Ns) > 0 {
		check(p.msg.Ns, true)
	}
	return renamed
}

// rdata returns rr's type and data in wire form, for comparisons.
func rdata(rr dns.RR) []byte {
	h := dns.Copy(rr)
	h.Header().Name = "."
	h.Header().Ttl = 0
	h.Header().Class = dns.ClassINET
	buf := make([]byte, dns.Len(h)+16)
	n, err := dns.PackRR(h, buf, 0, nil, false)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// subset reports whether every record of theirs is also one of mine
// (same type and data): then it is our own packet or a cache echoing us.
func subset(theirs, mine []dns.RR) bool {
	for _, t := range theirs {
		td := rdata(t)
		found := false
		for _, m := range mine {
			if bytes.Equal(td, rdata(m)) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// compareSets is the probe tie-break: records sorted, compared
// lexicographically; the lexicographically later set wins.
func compareSets(mine, theirs []dns.RR) int {
	a := sortedRdata(mine)
	b := sortedRdata(theirs)
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := bytes.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

func sortedRdata(rrs []dns.RR) [][]byte {
	out := make([][]byte, 0, len(rrs))
	for _, rr := range rrs {
		out = append(out, rdata(rr))
	}
	slices.SortFunc(out, bytes.Compare)
	return out
}

// rename gives the holder of name a new name: "Name (2)" for instances,
// "host-2" for the host. Callers hold a.mu.
func (a *Advertiser) rename(name string) {
	if strings.EqualFold(name, a.hostName()) {
		old := a.host
		a.host = bumpHost(a.host)
		a.log.Warn("mdns host name in use on the lan; renamed", "old", old, "new", a.host)
		return
	}
	for i, s := range a.services {
		if strings.EqualFold(instanceName(s), name) {
			old := s.Instance
			a.services[i].Instance = bumpInstance(s.Instance)
			a.log.Warn("mdns instance name in use on the lan; renamed", "type", s.Type, "old", old, "new", a.services[i].Instance)
		}
	}
}

func bumpInstance(s string) string {
	n := 2
	if i := strings.LastIndex(s, " ("); i >= 0 && strings.HasSuffix(s, ")") {
		var k int
		if _, err := fmt.Sscanf(s[i:], " (%d)", &k); err == nil && k >= 2 {
			s, n = s[:i], k+1
		}
	}
	suffix := fmt.Sprintf(" (%d)", n)
	for len(s)+len(suffix) > 63 {
		s = s[:len(s)-1]
	}
	return s + suffix
}

func bumpHost(s string) string {
	n := 2
	if i := strings.LastIndex(s, "-"); i >= 0 {
		var k int
		if _, err := fmt.Sscanf(s[i+1:], "%d", &k); err == nil && k >= 2 && fmt.Sprint(k) == s[i+1:] {
			s, n = s[:i], k+1
		}
	}
	return fmt.Sprintf("%s-%d", s, n)
}

// Announce sends every record again, unsolicited.
func (a *Advertiser) Announce() { a.announce() }

// announce sends every record on every interface (RFC 6762 §8.3); the
// second announcement follows a second later from run.
func (a *Advertiser) announce() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ifi := range a.conn.Interfaces() {
		m := new(dns.Msg)
		m.Response, m.Authoritative = true, true
		m.Answer = a.records(&ifi, false)
		if err := a.conn.send(m, &ifi); err != nil {
			a.log.Debug("cannot announce", "err", err)
			continue
		}
		a.announcements.Add(1)
	}
}

// Announcements returns how many unsolicited announcements were sent (one
// per interface each time the records are announced).
func (a *Advertiser) Announcements() uint64 { return a.announcements.Load() }

func (a *Advertiser) run() {
	defer close(a.done)
	second := time.NewTimer(time.Second)
	defer second.Stop()
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-second.C:
			a.announce()
		case <-poll.C:
			a.watchInterfaces()
		case <-a.renamed:
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-a.stop:
				case <-ctx.Done():
				}
				cancel()
			}()
			if err := a.probe(ctx); err == nil {
				a.announce()
				second.Reset(time.Second)
			}
			cancel()
		case p := <-a.inbox:
			a.handle(p)
		}
	}
}

// watchInterfaces re-announces when interfaces or their addresses change.
func (a *Advertiser) watchInterfaces() {
	ifs, err := selectInterfaces(a.conn.names)
	if err != nil {
		return
	}
	sig := signature(ifs)
	if sig == a.sig {
		return
	}
	a.sig = sig
	before := a.announced
	a.conn.setInterfaces(ifs)
	a.announced = a.currentAddrs()
	a.log.Info("network interfaces changed; announcing again", "interfaces", len(ifs))
	// Goodbyes for addresses gone from an interface still in use, so
	// caches drop them at once instead of at their TTL.
	a.mu.Lock()
	for i := range ifs {
		now := a.announced[ifs[i].Index]
		var bye []dns.RR
		for _, ip := range before[ifs[i].Index] {
			if slices.ContainsFunc(now, ip.Equal) {
				continue
			}
			if ip.To4() != nil {
				bye = append(bye, &dns.A{Hdr: hdr(a.hostName(), dns.TypeA, 0, false), A: ip})
			} else {
				bye = append(bye, &dns.AAAA{Hdr: hdr(a.hostName(), dns.TypeAAAA, 0, false), AAAA: ip})
			}
		}
		if len(bye) > 0 {
			m := new(dns.Msg)
			m.Response, m.Authoritative = true, true
			m.Answer = bye
			if err := a.conn.send(m, &ifs[i]); err != nil {
				a.log.Debug("cannot send address goodbye", "err", err)
			}
		}
	}
	a.mu.Unlock()
	a.announce()
}

// currentAddrs returns the addresses of the selected interfaces.
func (a *Advertiser) currentAddrs() map[int][]net.IP {
	out := map[int][]net.IP{}
	for _, ifi := range a.conn.Interfaces() {
		v4, v6 := a.conn.addresses(ifi.Index)
		out[ifi.Index] = slices.Concat(v4, v6)
	}
	return out
}

// handle answers queries and watches responses for conflicts.
func (a *Advertiser) handle(p packet) {
	if p.msg.Response {
		if a.conflicts(p) {
			select {
			case a.renamed <- struct{}{}:
			default:
			}
		}
		return
	}
	if len(p.msg.Question) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ifi := a.conn.selected(p.ifIndex)
	if ifi == nil {
		return
	}
	answers, extra := answersFor(p.msg, a.records(ifi, false))
	if len(answers) == 0 {
		return
	}
	if p.from.Port != mdnsPort {
		a.answerLegacy(p, answers, extra)
		return
	}
	// A probe by someone else for one of our names: defend it now.
	a.answerMulticast(ifi, answers, extra, len(p.msg.Ns) > 0)
}

// answersFor returns the records of all that answer the query's questions
// (less its known answers) and the additional records: for a PTR the
// instance's SRV and TXT, and for an SRV its host's addresses.
func answersFor(query *dns.Msg, all []dns.RR) (answers, extra []dns.RR) {
	for _, q := range query.Question {
		for _, rr := range all {
			h := rr.Header()
			if !strings.EqualFold(h.Name, q.Name) || (q.Qtype != dns.TypeANY && q.Qtype != h.Rrtype) {
				continue
			}
			if knownAnswer(query.Answer, rr) {
				continue
			}
			answers = appendRR(answers, rr)
			if ptr, ok := rr.(*dns.PTR); ok {
				for _, x := range all {
					if strings.EqualFold(x.Header().Name, ptr.Ptr) {
						extra = appendRR(extra, x)
					}
				}
			}
		}
	}
	for _, x := range slices.Clone(extra) {
		if srv, ok := x.(*dns.SRV); ok {
			for _, y := range all {
				if strings.EqualFold(y.Header().Name, srv.Target) {
					extra = appendRR(extra, y)
				}
			}
		}
	}
	return answers, extra
}

// answerLegacy answers a plain DNS resolver asking port 5353 (RFC 6762
// §6.7) directly, with its id and question, short TTLs, no flush bits.
func (a *Advertiser) answerLegacy(p packet, answers, extra []dns.RR) {
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	m.Id = p.msg.Id
	m.Question = p.msg.Question
	for _, rr := range append(answers, extra...) {
		rr = dns.Copy(rr)
		rr.Header().Class &^= 1 << 15
		rr.Header().Ttl = min(rr.Header().Ttl, 10)
		if len(m.Answer) < len(answers) {
			m.Answer = append(m.Answer, rr)
		} else {
			m.Extra = append(m.Extra, rr)
		}
	}
	if err := a.conn.sendTo(m, p.from, p.ifIndex); err != nil {
		a.log.Debug("cannot answer legacy query", "err", err)
	}
}

// answerMulticast multicasts the answers on ifi. A record is multicast at
// most once a second per interface (RFC 6762 §6), once per 250 ms when
// defending a probe: a query flood costs bounded work and traffic.
// Callers hold a.mu.
func (a *Advertiser) answerMulticast(ifi *net.Interface, answers, extra []dns.RR, defend bool) {
	m := new(dns.Msg)
	m.Response, m.Authoritative = true, true
	now := time.Now()
	gap := time.Second
	if defend {
		gap = 250 * time.Millisecond
	}
	for _, rr := range answers {
		k := fmt.Sprint(ifi.Index, rr.String())
		if now.Sub(a.lastSent[k]) < gap {
			continue
		}
		a.lastSent[k] = now
		m.Answer = append(m.Answer, rr)
	}
	if len(m.Answer) == 0 {
		return
	}
	m.Extra = extra
	if len(a.lastSent) > 4096 {
		clear(a.lastSent)
	}
	if err := a.conn.send(m, ifi); err != nil {
		a.log.Debug("cannot answer query", "err", err)
	}
}

func appendRR(list []dns.RR, rr dns.RR) []dns.RR {
	for _, x := range list {
		if x == rr {
			return list
		}
	}
	return append(list, rr)
}

// knownAnswer reports whether the querier listed rr with at least half
// its TTL left (known-answer suppression, RFC 6762 §7.1).
func knownAnswer(known []dns.RR, rr dns.RR) bool {
	for _, k := range known {
		if strings.EqualFold(k.Header().Name, rr.Header().Name) && k.Header().Ttl >= rr.Header().Ttl/2 &&
			bytes.Equal(rdata(k), rdata(rr)) {
			return true
		}
	}
	return false
}

// Close sends goodbyes (TTL 0) for every record and closes the sockets.
func (a *Advertiser) Close() error {
	a.once.Do(func() {
		close(a.stop)
		<-a.done
		a.mu.Lock()
		for _, ifi := range a.conn.Interfaces() {
			m := new(dns.Msg)
			m.Response, m.Authoritative = true, true
			m.Answer = a.records(&ifi, true)
			if err := a.conn.send(m, &ifi); err != nil {
				a.log.Debug("cannot send goodbye", "err", err)
			}
		}
		a.mu.Unlock()
		a.conn.release(a.inbox)
	})
	return nil
}
