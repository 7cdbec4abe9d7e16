package mdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Config configures the hub's mDNS adapter.
type Config struct {
	// Name is the hub name, the instance name of both services.
	Name string
	// Host is the host label (without .local), unique per hub.
	Host string
	// Interfaces to use; empty: every LAN interface (docker, veth, tun … skipped).
	Interfaces []string
	// HTTPPort and MQTTPort are the bound ports to advertise.
	HTTPPort, MQTTPort int
	// Scheme of the directory: http or https.
	Scheme string
	// MQTTSPort is the MQTT-over-TLS port, advertised as _secure-mqtt._tcp;
	// 0: none.
	MQTTSPort int
	// TLSFingerprint, when TLS is on, is carried in the TXT key tls of the
	// directory and the secure broker (lmos.Fingerprint).
	TLSFingerprint string
	ForgetAfter    time.Duration
	// Admission is the join mode for new Things (nil: open).
	Admission *hub.Admission
	// DID is the hub's own key (did:key): its own announcement is not a
	// peer candidate.
	DID    string
	Logger *slog.Logger
}

// Hub advertises the hub's directory and broker and registers the Things
// announced on the LAN.
type Hub struct {
	log       *slog.Logger
	browser   *dnssd.Browser
	Registrar *Registrar
	// Candidates are the other lmos-hubs on the LAN (PROTOCOL §9).
	Candidates *Candidates

	host string // the host label asked for, before any rename
	// texts are the TXT records of the services, in order, without the
	// tls key; tlsAt marks the services that carry it.
	texts [][]string
	tlsAt []bool
	fp    string

	conn *dnssd.Conn

	mu     sync.Mutex
	adv    *dnssd.Advertiser
	advErr error // why advertising failed (nil: probing or advertising)
	ctx    context.Context
	stop   context.CancelFunc
	done   chan struct{}
}

// Open starts browsing and registering at once, and advertising in the
// background (probing for the names takes about a second).
func Open(reg *hub.Registry, cfg Config) (*Hub, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	h := &Hub{log: cfg.Logger, host: dnssd.HostLabel(cfg.Host), done: make(chan struct{})}
	// One socket pair for browsing and advertising: with two, the kernel
	// would hand each unicast query to one of them at random.
	c, err := dnssd.Listen(cfg.Interfaces, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("cannot browse mdns: %w", err)
	}
	if len(c.Interfaces()) == 0 {
		h.log.Warn("no network interface for mdns", "interfaces", cfg.Interfaces)
	}
	h.Registrar = NewRegistrar(reg, RegistrarConfig{ForgetAfter: cfg.ForgetAfter, Admission: cfg.Admission, Logger: cfg.Logger})
	h.Candidates = NewCandidates(CandidatesConfig{Self: cfg.DID, Logger: cfg.Logger})
	onEvent := func(ev dnssd.Event) {
		h.Registrar.Handle(ev)
		h.Candidates.Handle(ev)
	}
	b, err := c.Browse(dnssd.BrowserConfig{Types: []string{lmos.ServiceWoT}, OnEvent: onEvent, Logger: cfg.Logger})
	if err != nil {
		c.Close()
		h.Registrar.Close()
		h.Candidates.Close()
		return nil, fmt.Errorf("cannot browse mdns: %w", err)
	}
	h.browser, h.conn = b, c
	services := []dnssd.Service{{
		Instance: cfg.Name, Type: lmos.ServiceWoT, Subtypes: []string{lmos.SubtypeDirectory}, Port: cfg.HTTPPort,
		Text: []string{lmos.TXTPath + "=" + lmos.DirectoryPath, lmos.TXTType + "=" + lmos.TypeDirectory, lmos.TXTScheme + "=" + cfg.Scheme},
	}}
	h.tlsAt = []bool{true}
	if cfg.MQTTPort > 0 {
		services = append(services, dnssd.Service{Instance: cfg.Name, Type: lmos.ServiceMQTT, Port: cfg.MQTTPort})
		h.tlsAt = append(h.tlsAt, false)
	}
	if cfg.MQTTSPort > 0 {
		services = append(services, dnssd.Service{Instance: cfg.Name, Type: lmos.ServiceSecureMQTT, Port: cfg.MQTTSPort})
		h.tlsAt = append(h.tlsAt, true)
	}
	h.fp = cfg.TLSFingerprint
	for i := range services {
		h.texts = append(h.texts, services[i].Text)
		services[i].Text = h.text(i)
	}
	h.ctx, h.stop = context.WithCancel(context.Background())
	go func() {
		defer close(h.done)
		a, err := c.Advertise(h.ctx, dnssd.AdvertiserConfig{Host: cfg.Host, Logger: cfg.Logger}, services...)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				h.log.Error("cannot advertise the hub over mdns", "err", err)
				h.mu.Lock()
				h.advErr = err
				h.mu.Unlock()
			}
			return
		}
		h.mu.Lock()
		h.adv = a
		fp := h.fp
		h.mu.Unlock()
		if fp != cfg.TLSFingerprint {
			h.SetTLSFingerprint(fp) // reloaded while probing
		}
		s := a.Services()
		h.log.Info("mdns advertising", "name", s[0].Instance, "host", a.Host()+".local", "http_port", cfg.HTTPPort, "mqtt_port", cfg.MQTTPort, "mqtts_port", cfg.MQTTSPort)
	}()
	h.log.Info("mdns browsing", "type", lmos.ServiceWoT, "interfaces", cfg.Interfaces)
	return h, nil
}

// text is the i-th service's TXT record with the current fingerprint.
func (h *Hub) text(i int) []string {
	t := append([]string{}, h.texts[i]...)
	if h.tlsAt[i] && h.fp != "" {
		t = append(t, lmos.TXTTLS+"="+h.fp)
	}
	return t
}

// SetTLSFingerprint announces a new certificate's fingerprint (after a
// reload) in the TXT records that carry it.
func (h *Hub) SetTLSFingerprint(fp string) {
	h.mu.Lock()
	h.fp = fp
	a := h.adv
	var texts [][]string
	for i := range h.texts {
		texts = append(texts, h.text(i))
	}
	h.mu.Unlock()
	if a == nil {
		return // the advertiser announces it once it has its names
	}
	changed := map[int][]string{}
	for i, t := range texts {
		if h.tlsAt[i] {
			changed[i] = t
		}
	}
	a.SetTexts(changed) // in one announcement (SetTexts says why)
}

// Advertiser returns the advertiser once the names are settled, else nil.
func (h *Hub) Advertiser() *dnssd.Advertiser {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.adv
}

// HostName is the hub's .local host name ("pi-1a2b3c.local"): the one
// advertised once the names are settled (renamed on a conflict), else the
// one being probed.
func (h *Hub) HostName() string {
	if a := h.Advertiser(); a != nil {
		return a.Host() + ".local"
	}
	return h.host + ".local"
}

// Status is what the hub's mDNS is doing, for its status page.
type Status struct {
	// State is "probing" (claiming its names), "advertising" or "failed";
	// the hub reports "off" (disabled) and "starting" (not open yet) too.
	State string `json:"state"`
	// Error says why advertising failed.
	Error string `json:"error,omitempty"`
	// Name is the instance name advertised (renamed on a conflict) and
	// Host the .local host name.
	Name string `json:"name,omitempty"`
	Host string `json:"host"`
	// Interfaces are the network interfaces mDNS uses now.
	Interfaces []string `json:"interfaces"`
	// Seen counts the _wot._tcp services on the LAN, the hub's own among them.
	Seen int `json:"seen"`
}

// Status reports the state of advertising and browsing.
func (h *Hub) Status() Status {
	st := Status{State: "probing", Host: h.HostName(), Interfaces: []string{}, Seen: len(h.browser.Entries())}
	for _, i := range h.conn.Interfaces() {
		st.Interfaces = append(st.Interfaces, i.Name)
	}
	h.mu.Lock()
	a, err := h.adv, h.advErr
	h.mu.Unlock()
	switch {
	case a != nil:
		st.State, st.Name = "advertising", a.Services()[0].Instance
	case err != nil:
		st.State, st.Error = "failed", err.Error()
	}
	return st
}

// Browser returns the browser of _wot._tcp.
func (h *Hub) Browser() *dnssd.Browser { return h.browser }

// Close sends the goodbyes and stops browsing and registering.
func (h *Hub) Close(ctx context.Context) error {
	h.stop()
	select {
	case <-h.done:
	case <-ctx.Done():
		return fmt.Errorf("cannot close mdns: %w", ctx.Err())
	}
	if a := h.Advertiser(); a != nil {
		a.Close()
	}
	h.browser.Close()
	h.Candidates.Close()
	return h.Registrar.Close()
}
