package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/dnssd"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// HubInfo is a hub found on the LAN.
type HubInfo struct {
	Name string
	// DirectoryURL is the directory TD (…/.well-known/wot).
	DirectoryURL string
	// BrokerURL is mqtt://host:port, from the directory TD's lmos:broker
	// link, else from the hub's _mqtt._tcp advertisement; mqtts://… when
	// the hub serves TLS only.
	BrokerURL string
	// SecureBrokerURL is mqtts://host:port when the hub serves MQTT over
	// TLS (its directory TD's mqtts lmos:broker link).
	SecureBrokerURL string
	// TLSFingerprint is the hub certificate's fingerprint as its TXT
	// record says (tls=): what a first connection can pin.
	TLSFingerprint string

	// linksRead: the directory TD was read (its broker links are what the
	// hub offers, not the _mqtt._tcp fallback).
	linksRead bool
}

// FindOptions configure FindHub.
type FindOptions struct {
	// Name picks a hub by instance name; "" takes the first found.
	Name string
	// Interfaces to browse on; empty: every LAN interface.
	Interfaces []string
	Logger     *slog.Logger
}

// FindHub browses mDNS for a WoT directory (_directory._sub._wot._tcp)
// until ctx ends, reads its directory TD and returns where its broker is.
func FindHub(ctx context.Context, opts FindOptions) (HubInfo, error) {
	return findHub(ctx, opts, nil)
}

// hubFilter decides whether the agent may use a hub found over mDNS: first
// on its announcement alone (entry, before anything is fetched from it),
// then on what its directory says (info, after). A refusal names why the
// hub is skipped.
type hubFilter struct {
	entry func(e dnssd.Entry) error
	info  func(ctx context.Context, h HubInfo) error
}

// maxSkipped bounds the announcements FindHub remembers having skipped.
const maxSkipped = 256

// findHub is FindHub taking only a hub filter accepts (nil: any). An
// announcement skipped is logged once and not looked at again until it
// changes, so a fake one is neither fetched nor dialled again and again.
func findHub(ctx context.Context, opts FindOptions, filter *hubFilter) (HubInfo, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b, err := dnssd.Browse(dnssd.BrowserConfig{
		Types:      []string{lmos.ServiceDirectory, lmos.ServiceMQTT},
		Interfaces: opts.Interfaces,
		Logger:     opts.Logger,
	})
	if err != nil {
		return HubInfo{}, fmt.Errorf("cannot find the hub: %w", err)
	}
	defer b.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	skipped := make(map[string]error)
	for {
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return HubInfo{}, fmt.Errorf("cannot find the hub: %w", lastErr)
			}
			return HubInfo{}, fmt.Errorf("cannot find the hub: no WoT directory (%s) answered on the LAN: %w", lmos.ServiceDirectory, ctx.Err())
		case <-tick.C:
		}
		entries := b.Entries()
		for _, e := range entries {
			if e.Service != lmos.ServiceWoT || (opts.Name != "" && e.Instance != opts.Name) {
				continue
			}
			key := announcementKey(e)
			if err, ok := skipped[key]; ok {
				lastErr = err
				continue
			}
			skip := func(err error) {
				lastErr = fmt.Errorf("the hub %q is skipped: %w", e.Instance, err)
				if len(skipped) < maxSkipped {
					skipped[key] = lastErr
				}
				opts.Logger.Warn("skipping a hub found over mDNS", "hub", e.Instance, "addrs", e.IPs, "port", e.Port, "reason", err)
			}
			if filter != nil && filter.entry != nil {
				if err := filter.entry(e); err != nil {
					skip(err)
					continue
				}
			}
			info, err := hubInfo(ctx, e, entries)
			if err != nil {
				lastErr = err
				continue
			}
			if filter != nil && filter.info != nil {
				if err := filter.info(ctx, info); err != nil {
					if !errors.Is(err, errTryAgain) {
						skip(err)
					} else {
						lastErr = err
					}
					continue
				}
			}
			return info, nil
		}
	}
}

// errTryAgain marks a filter's refusal that may change by itself (the
// hub's broker not answering yet): the announcement is looked at again.
var errTryAgain = errors.New("try again")

// announcementKey names what an answer announces: a changed one is looked
// at again.
func announcementKey(e dnssd.Entry) string {
	return fmt.Sprintf("%s|%s|%d|%v|%q", e.Key(), e.Host, e.Port, e.IPs, e.Text)
}

func hubInfo(ctx context.Context, dir dnssd.Entry, entries []dnssd.Entry) (HubInfo, error) {
	u, err := dir.TDURL()
	if err != nil {
		return HubInfo{}, err
	}
	info := HubInfo{Name: dir.Instance, DirectoryURL: u, TLSFingerprint: dir.TXT()[lmos.TXTTLS]}
	plain, secure, err := brokerLinks(ctx, u, info.TLSFingerprint)
	info.linksRead = err == nil
	if err == nil && (plain != "" || secure != "") {
		info.BrokerURL, info.SecureBrokerURL = plain, secure
		if plain == "" {
			info.BrokerURL = secure
		}
		return info, nil
	}
	for _, e := range entries {
		if e.Service == lmos.ServiceMQTT && e.Instance == dir.Instance && len(e.IPs) > 0 {
			host := e.IPs[0].String()
			if e.IPs[0].To4() == nil && e.IPs[0].IsLinkLocalUnicast() {
				host += "%" + e.Iface
			}
			info.BrokerURL = "mqtt://" + net.JoinHostPort(host, strconv.Itoa(e.Port))
			return info, nil
		}
	}
	return HubInfo{}, fmt.Errorf("the hub %q advertises no broker (no lmos:broker link, no _mqtt._tcp)", dir.Instance)
}

// brokerLinks reads the lmos:broker links of the directory TD at u: the
// mqtt:// and the mqtts:// one. An https directory is read trusting the
// certificate with fingerprint fp (from the same TXT record).
func brokerLinks(ctx context.Context, u, fp string) (plain, secure string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	client := http.DefaultClient
	if strings.HasPrefix(u, "https://") && fp != "" {
		check, err := lmos.Pin(fp)
		if err != nil {
			return "", "", err
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: lmos.PinnedConfig(check)}}
		defer client.CloseIdleConnections()
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("directory TD: %s", resp.Status)
	}
	var td struct {
		Links []struct {
			Rel  string `json:"rel"`
			Href string `json:"href"`
		} `json:"links"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&td); err != nil {
		return "", "", err
	}
	for _, l := range td.Links {
		switch {
		case l.Rel != "lmos:broker":
		case strings.HasPrefix(l.Href, "mqtt://") && plain == "":
			plain = l.Href
		case strings.HasPrefix(l.Href, "mqtts://") && secure == "":
			secure = l.Href
		}
	}
	return plain, secure, nil
}

// AdvertiseOptions configure Advertise.
type AdvertiseOptions struct {
	// Name is the mDNS instance name (default: the TD's title).
	Name string
	// TD is the Thing Description served at /td (JSON).
	TD []byte
	// Addr is the HTTP listen address (default ":0").
	Addr string
	// Interfaces to advertise on; empty: every LAN interface.
	Interfaces []string
	// TTL of the mDNS records; 0: the defaults (2 and 75 minutes). Short
	// TTLs let hubs notice a crashed agent sooner, at the cost of traffic.
	TTL    time.Duration
	Logger *slog.Logger
}

// Advertisement serves an agent's TD over HTTP and announces it as a
// _wot._tcp Thing, for hubs that only browse mDNS (PROTOCOL §8).
type Advertisement struct {
	srv *http.Server
	adv *dnssd.Advertiser
	// Addr is the bound HTTP address.
	Addr net.Addr

	mu      sync.Mutex
	td      []byte
	version int
}

// Advertise serves opts.TD at /td and advertises it; Close sends goodbyes.
func Advertise(ctx context.Context, opts AdvertiseOptions) (*Advertisement, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var doc struct {
		Title string `json:"title"`
	}
	if err := json.Unmarshal(opts.TD, &doc); err != nil {
		return nil, fmt.Errorf("cannot advertise: the TD is not a JSON object: %w", err)
	}
	if opts.Name == "" {
		opts.Name = doc.Title
	}
	if len(opts.Name) > 63 {
		// An instance label holds 63 bytes; cut on a rune boundary.
		opts.Name = strings.ToValidUTF8(opts.Name[:63], "")
	}
	if opts.Addr == "" {
		opts.Addr = ":0"
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("cannot advertise: cannot listen on %s: %w", opts.Addr, err)
	}
	a := &Advertisement{Addr: ln.Addr(), td: opts.TD, version: 1}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /td", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		td := a.td
		a.mu.Unlock()
		w.Header().Set("Content-Type", lmos.MediaTD)
		w.Write(td)
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(ln)
	a.adv, err = dnssd.Advertise(ctx, dnssd.AdvertiserConfig{
		Host:       opts.Name,
		Interfaces: opts.Interfaces,
		TTL:        uint32((opts.TTL + time.Second - 1) / time.Second),
		Logger:     opts.Logger,
	}, dnssd.Service{Instance: opts.Name, Type: lmos.ServiceWoT, Port: ln.Addr().(*net.TCPAddr).Port, Text: a.text()})
	if err != nil {
		a.srv.Close()
		return nil, fmt.Errorf("cannot advertise: %w", err)
	}
	return a, nil
}

func (a *Advertisement) text() []string {
	path := "/td"
	if a.version > 1 {
		// A new path makes hubs fetch the TD again (PROTOCOL §8: a TXT
		// change re-fetches).
		path += "?v=" + strconv.Itoa(a.version)
	}
	return []string{lmos.TXTPath + "=" + path, lmos.TXTType + "=" + lmos.TypeThing, lmos.TXTScheme + "=http"}
}

// Name returns the instance name in use (renamed on a conflict).
func (a *Advertisement) Name() string { return a.adv.Services()[0].Instance }

// SetTD serves a new TD and announces the change.
func (a *Advertisement) SetTD(td []byte) {
	a.mu.Lock()
	a.td = td
	a.version++
	text := a.text()
	a.mu.Unlock()
	a.adv.SetText(0, text)
}

// Announce sends the announcement again (it is sent twice at start and
// answered on query; this is for a network change the host cannot see).
func (a *Advertisement) Announce() { a.adv.Announce() }

// Close sends goodbyes and stops serving the TD.
func (a *Advertisement) Close() error {
	err := a.adv.Close()
	if cerr := a.srv.Close(); err == nil && !errors.Is(cerr, http.ErrServerClosed) {
		err = cerr
	}
	return err
}
