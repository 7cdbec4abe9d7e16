package federation

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Invocation forwarding (PROTOCOL §9.1): an interaction with a Thing
// mirrored from a paired peer goes to that peer's interaction proxy
// (PROTOCOL §3.3), signed with this hub's key, and the peer's answers come
// back as the Thing's results. A Thing mirrored from a directory that is no
// paired hub is not reached from here.

// PeerList is what the forwarder and the mirrors need of the paired peers
// (*hub.Peers).
type PeerList interface {
	List() []hub.Peer
	Watch(fn func(peer hub.Peer, paired bool)) []hub.Peer
}

// dialTimeout bounds connecting to a peer: a hub that is gone answers
// EUNAVAILABLE soon rather than after the proxy's whole timeout.
const dialTimeout = 3 * time.Second

// maxSSELine bounds one line of a peer's event stream (a value or an
// output, at most the peer's http.maxBodyBytes, JSON-encoded on one line).
const maxSSELine = 4 << 20

// Forwarder is the hub.Transport of Things mirrored from paired peers
// (app registers it for hub.SourceRemote).
type Forwarder struct {
	key    ed25519.PrivateKey
	peers  PeerList
	client *http.Client
	now    func() time.Time
}

var _ hub.Transport = (*Forwarder)(nil)

// NewForwarder returns a forwarder that signs with key (the hub's own)
// and reaches the peers of peers.
func NewForwarder(key ed25519.PrivateKey, peers PeerList) *Forwarder {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.Proxy = nil // peers are on the LAN
	return &Forwarder{key: key, peers: peers, client: &http.Client{Transport: tr}, now: time.Now}
}

// home is the paired peer a mirrored Thing lives on.
func (f *Forwarder) home(in hub.Interaction) (hub.Peer, error) {
	if in.Thing == nil || in.Thing.Meta.Origin.Source != hub.SourceRemote {
		return hub.Peer{}, hub.Errorf(hub.EUNAVAILABLE, "Thing %q is not mirrored from a peer", in.ThingID)
	}
	from := in.Thing.Meta.Origin.Hub
	for _, p := range f.peers.List() {
		if p.URL == from {
			return p, nil
		}
	}
	return hub.Peer{}, hub.Errorf(hub.EUNAVAILABLE, "Thing %q lives at %s, which is not a paired hub: reach it there", in.ThingID, from)
}

// Deliver forwards in to the proxy of the Thing's home hub.
func (f *Forwarder) Deliver(ctx context.Context, in hub.Interaction, emit func(hub.Result) error) error {
	peer, err := f.home(in)
	if err != nil {
		return err
	}
	req, err := f.request(ctx, peer, in)
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &hub.Error{Code: hub.EUNAVAILABLE, Message: fmt.Sprintf("cannot reach %s, the hub Thing %q lives on", peer.URL, in.ThingID), Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusBadGateway {
		// The Thing itself failed: its problem is the result (a write
		// has none: its failure is the error).
		p := readProblem(resp)
		if in.Op == hub.OpWriteProperty {
			return hub.Errorf(hub.EFAILED, "%s", p.Detail)
		}
		return emit(hub.Result{Status: hub.StatusFailed, Problem: &p})
	}
	if resp.StatusCode >= 300 {
		return peerError(peer, resp)
	}
	switch in.Op {
	case hub.OpReadProperty:
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxSSELine))
		if err != nil {
			return &hub.Error{Code: hub.EUNAVAILABLE, Message: "cannot read the peer's answer", Err: err}
		}
		return emit(hub.Result{Status: hub.StatusCompleted, Data: data, ContentType: lmos.MediaOf(resp.Header.Get("Content-Type"))})
	case hub.OpWriteProperty:
		return emit(hub.Result{Status: hub.StatusCompleted})
	case hub.OpInvokeAction:
		if lmos.MediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, maxSSELine))
			return emit(hub.Result{Status: hub.StatusCompleted, Data: data, ContentType: lmos.MediaOf(resp.Header.Get("Content-Type"))})
		}
		return readInvocation(ctx, resp.Body, emit)
	}
	return readStream(ctx, in.Name, resp.Body, emit)
}

// request builds the signed proxy request for in.
func (f *Forwarder) request(ctx context.Context, peer hub.Peer, in hub.Interaction) (*http.Request, error) {
	kind, method := "properties", http.MethodGet
	switch in.Op {
	case hub.OpWriteProperty:
		method = http.MethodPut
	case hub.OpInvokeAction:
		kind, method = "actions", http.MethodPost
	case hub.OpSubscribeEvent:
		kind = "events"
	}
	target := peer.URL + "/proxy/" + url.PathEscape(in.ThingID) + "/" + kind + "/" + url.PathEscape(in.Name)
	var body io.Reader
	if in.Op == hub.OpWriteProperty || in.Op == hub.OpInvokeAction && len(in.Input) > 0 {
		body = bytes.NewReader(in.Input)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, &hub.Error{Code: hub.EINTERNAL, Message: "cannot build the forwarded request", Err: err}
	}
	if body != nil {
		ct := in.ContentType
		if ct == "" {
			ct = lmos.MediaJSON
		}
		req.Header.Set("Content-Type", ct)
	}
	accept := in.Accept
	if accept == "" {
		accept = lmos.MediaJSON
	}
	// Streams and invocations come as server-sent events (an invocation's
	// partial results too), whose data are JSON.
	if in.Op.Streaming() || in.Op == hub.OpInvokeAction && accept == lmos.MediaJSON {
		accept = "text/event-stream"
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "lmos-hub-federation")
	if in.Traceparent != "" {
		req.Header.Set("traceparent", in.Traceparent)
		req.Header.Set("tracestate", in.Tracestate)
	}
	if err := lmos.SignPeerRequest(req, f.key, f.now()); err != nil {
		return nil, err
	}
	return req, nil
}

// readProblem reads a problem answer (an empty one when it is none).
func readProblem(resp *http.Response) lmos.Problem {
	var p lmos.Problem
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(b, &p)
	if p.Status == 0 {
		p = lmos.ProblemFor(resp.StatusCode, lmos.Truncate(strings.TrimSpace(string(b)), 512))
	}
	return p
}

// peerError is the hub error of a peer's refusal: the peer's code and
// detail, said to come from the peer.
func peerError(peer hub.Peer, resp *http.Response) error {
	p := readProblem(resp)
	code, ok := lmos.CodeOf(resp.StatusCode)
	if !ok {
		code = hub.EUNAVAILABLE
	}
	if code == hub.EUNAUTHORIZED || code == hub.EFORBIDDEN {
		// This hub's signature was not good enough there: not the
		// consumer's credentials, which the peer never saw.
		return hub.Errorf(hub.EUNAVAILABLE, "the hub at %s refused this hub (%d: %s); is this hub paired there?", peer.URL, resp.StatusCode, p.Detail)
	}
	return hub.Errorf(code, "the hub at %s: %s", peer.URL, p.Detail)
}

// sseEvent is one server-sent event.
type sseEvent struct{ name, data string }

// readEvents calls fn with each event of an event stream until it ends or
// fn fails.
func readEvents(r io.Reader, fn func(sseEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	var ev sseEvent
	var data []string
	has := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if has {
				ev.data = strings.Join(data, "\n")
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data, has = sseEvent{}, nil, false
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name, has = value, true
		case "data":
			data, has = append(data, value), true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

// readInvocation turns an invocation's event stream (pending, running,
// completed, failed) into results.
func readInvocation(ctx context.Context, body io.Reader, emit func(hub.Result) error) error {
	final := false
	err := readEvents(body, func(ev sseEvent) error {
		res := hub.Result{Status: ev.name, ContentType: lmos.MediaJSON}
		if ev.data != "" {
			res.Data = []byte(ev.data)
		}
		switch ev.name {
		case hub.StatusPending, hub.StatusRunning, hub.StatusCompleted:
		case hub.StatusFailed:
			var p lmos.Problem
			if json.Unmarshal(res.Data, &p) != nil || p.Status == 0 {
				p = hub.ThingFailed(nil)
			}
			if p.Status != http.StatusBadGateway {
				// The peer's own failure (a timeout there, the Thing
				// gone): a hub error, as if it were this hub's.
				code, ok := lmos.CodeOf(p.Status)
				if !ok {
					code = hub.EUNAVAILABLE
				}
				return hub.Errorf(code, "%s", p.Detail)
			}
			res.Problem, res.Data, res.ContentType = &p, nil, ""
		default:
			return nil
		}
		final = res.Final()
		if err := emit(res); err != nil {
			return err
		}
		if final {
			return errFinal
		}
		return nil
	})
	switch {
	case errors.Is(err, errFinal):
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, io.EOF):
		return hub.Errorf(hub.EUNAVAILABLE, "the peer's stream ended before the final result")
	}
	return err
}

var errFinal = errors.New("final result")

// readStream turns an observation's or a subscription's event stream into
// results: pending once it is in place, then one running result per
// value, until ctx ends.
func readStream(ctx context.Context, name string, body io.Reader, emit func(hub.Result) error) error {
	if err := emit(hub.Result{Status: hub.StatusPending}); err != nil {
		return err
	}
	err := readEvents(body, func(ev sseEvent) error {
		switch ev.name {
		case name:
			return emit(hub.Result{Status: hub.StatusRunning, Data: []byte(ev.data), ContentType: lmos.MediaJSON})
		case "error":
			var p lmos.Problem
			_ = json.Unmarshal([]byte(ev.data), &p)
			code, ok := lmos.CodeOf(p.Status)
			if !ok {
				code = hub.EUNAVAILABLE
			}
			return hub.Errorf(code, "the peer ended the stream: %s", p.Detail)
		}
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return hub.Errorf(hub.EUNAVAILABLE, "the peer ended the stream")
	}
	return err
}
