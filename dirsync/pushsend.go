package dirsync

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
)

// maxRetryAfter caps how long a Retry-After may hold the outbox.
const maxRetryAfter = time.Hour

// outcome is what one op's attempt came to.
type outcome int

const (
	sent     outcome = iota // the remote applied it (or there was nothing to send)
	retry                   // the remote failed: back off, the op stays
	refused                 // the remote refused the token: retry slowly
	rejected                // the remote refused this op: report, drop it
	stopped                 // Close cut the request short
)

// result is one attempt's outcome with what the state needs.
type result struct {
	outcome
	err     error
	wait    time.Duration // Retry-After, for retry
	release bool          // the id is no longer claimed (deleted, mirrored)
	request bool          // a request was made
	ttl     time.Duration // the registration.ttl sent with a PUT
}

// send dispatches the outbox's ops in order, at most Concurrency at once
// and one per Thing, until ctx ends.
func (p *Pusher) send(ctx context.Context) {
	sem := make(chan struct{}, p.cfg.Concurrency)
	window := 4*p.cfg.Concurrency + 64
	for {
		if !p.waitPause(ctx) {
			return
		}
		epoch := p.epochNow()
		ops, err := p.box.Pending(0, window)
		if err != nil {
			p.log.Error("cannot read the outbox", "err", err)
			p.setPause(p.cfg.MaxBackoff)
			continue
		}
		dispatched := 0
		for _, op := range ops {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ok, stale := p.claim(op.ID, epoch)
			if !ok {
				<-sem
				if stale || p.paused() {
					break
				}
				continue
			}
			dispatched++
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.finish(op, p.attempt(ctx, op))
				<-sem
				p.poke()
			}()
		}
		if p.paused() {
			continue
		}
		if dispatched == 0 {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
		}
	}
}

// claim marks id in flight; false when it already is or a pause began,
// and stale when ops were removed from the outbox since the snapshot of
// epoch was read (it may list them: read it again).
func (p *Pusher) claim(id string, epoch uint64) (ok, stale bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch != epoch {
		return false, true
	}
	if p.inflight[id] || p.cfg.Clock.Now().Before(p.pause) {
		return false, false
	}
	p.inflight[id] = true
	return true, false
}

func (p *Pusher) epochNow() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch
}

func (p *Pusher) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Clock.Now().Before(p.pause)
}

// waitPause waits out a backoff; false when ctx ended.
func (p *Pusher) waitPause(ctx context.Context) bool {
	for {
		p.mu.Lock()
		d := p.pause.Sub(p.cfg.Clock.Now())
		p.mu.Unlock()
		if d <= 0 {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-p.cfg.Clock.After(d):
		}
	}
}

// setPause holds every request for d (unless a longer pause runs).
func (p *Pusher) setPause(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := p.cfg.Clock.Now().Add(d); until.After(p.pause) {
		p.pause = until
	}
}

// backoff is the exponential backoff after n consecutive failures, with
// jitter (half to all of it), capped.
func (p *Pusher) backoff(n int) time.Duration {
	d := p.cfg.MaxBackoff
	if n < 30 {
		d = min(p.cfg.MinBackoff<<max(n-1, 0), p.cfg.MaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// finish records what came of op. A sent or rejected op stays in flight
// until commit has removed it from the outbox, so it is not sent twice.
func (p *Pusher) finish(op hub.OutboxOp, r result) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.outcome == sent || r.outcome == rejected {
		p.acks = append(p.acks, hub.OutboxAck{ID: op.ID, Version: op.Version, Release: r.release})
		select {
		case p.ackc <- struct{}{}:
		default:
		}
	} else {
		delete(p.inflight, op.ID)
	}
	switch r.outcome {
	case sent:
		if r.release {
			delete(p.claimed, op.ID)
			delete(p.pushed, op.ID)
		} else if r.request {
			p.pushed[op.ID] = pushState{at: now, ttl: r.ttl}
		}
		if r.request {
			p.st.Sent++
			p.st.LastSuccess = now
			p.st.State = hub.LinkConnected
			p.failures = 0
		}
	case rejected:
		p.failed(r.err, now)
		p.st.State = hub.LinkConnected // it answered
		p.log.Warn("the remote directory rejected a thing; it is not pushed until it changes", "id", op.ID, "err", r.err)
	case retry, refused:
		p.failed(r.err, now)
		p.st.State = hub.LinkDown
		if now.Before(p.pause) {
			return // already backing off: one failure, one step
		}
		p.failures++
		wait := p.backoff(p.failures)
		if r.outcome == refused {
			wait = p.cfg.MaxBackoff
		}
		if r.wait > 0 {
			wait = min(r.wait, maxRetryAfter)
		}
		p.pause = now.Add(wait)
		p.log.Warn("cannot push to the remote directory; retrying", "id", op.ID, "err", r.err, "retry_in", wait.Round(time.Millisecond))
	}
}

// commit removes the ops sent from the outbox, every ack waiting in one
// commit (the requests go on meanwhile), until ctx ends.
func (p *Pusher) commit(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.ackc:
			p.flush()
		}
	}
}

// flush commits the acks waiting.
func (p *Pusher) flush() {
	p.mu.Lock()
	acks := p.acks
	p.acks = nil
	p.mu.Unlock()
	if len(acks) == 0 {
		return
	}
	if err := p.box.Done(acks...); err != nil {
		p.log.Error("cannot remove sent changes from the outbox; they will be sent again", "changes", len(acks), "err", err)
	}
	p.mu.Lock()
	for _, a := range acks {
		delete(p.inflight, a.ID)
	}
	p.epoch++
	p.mu.Unlock()
	p.poke()
}

// failed counts an error; p.mu is held.
func (p *Pusher) failed(err error, now time.Time) {
	p.st.Errors++
	p.st.LastError = err.Error()
	p.st.LastErrorAt = now
}

// attempt sends op: the Thing's current document, or its deletion.
func (p *Pusher) attempt(ctx context.Context, op hub.OutboxOp) result {
	if op.Delete {
		return p.remove(ctx, op.ID)
	}
	t, err := p.reg.Get(op.ID)
	if hub.ErrorCode(err) == hub.ENOTFOUND {
		return p.remove(ctx, op.ID) // deleted since; its event follows
	}
	if err != nil {
		return result{outcome: rejected, err: fmt.Errorf("cannot read %q: %w", op.ID, err)}
	}
	if t.Meta.Origin.Source == hub.SourceRemote {
		// Mirrored here now (its agent moved away): never pushed, and
		// its remote copy is its new hub's, not ours to delete.
		return result{outcome: sent, release: true}
	}
	raw, err := p.reg.Raw(op.ID)
	if hub.ErrorCode(err) == hub.ENOTFOUND {
		return p.remove(ctx, op.ID)
	}
	if err != nil {
		return result{outcome: retry, err: fmt.Errorf("cannot read %q: %w", op.ID, err)}
	}
	body, ttl, err := p.document(raw)
	if err != nil {
		return result{outcome: rejected, err: fmt.Errorf("cannot push %q: %w", op.ID, err)}
	}
	r := p.do(ctx, http.MethodPut, op.ID, body)
	r.ttl = ttl
	return r
}

// remove deletes id on the remote if this hub may have put it there.
func (p *Pusher) remove(ctx context.Context, id string) result {
	p.mu.Lock()
	_, claimed := p.claimed[id]
	p.mu.Unlock()
	if !claimed {
		return result{outcome: sent, release: true}
	}
	r := p.do(ctx, http.MethodDelete, id, nil)
	if r.outcome == sent {
		r.release = true
	}
	return r
}

// document is the body pushed for raw, the stored document: an unsigned
// one gets registration.ttl = TTL; a signed one goes exactly as signed,
// since its proof covers registration (PROTOCOL §6), with the ttl its
// signer gave it, if any.
func (p *Pusher) document(raw []byte) ([]byte, time.Duration, error) {
	members, err := jsonx.Members(raw)
	if err != nil {
		return nil, 0, err
	}
	var reg *jsonx.Member
	for i := range members {
		switch string(members[i].Key) {
		case "proof":
			return raw, signedTTL(raw), nil
		case "registration":
			reg = &members[i]
		}
	}
	secs := int64(math.Ceil(p.cfg.TTL.Seconds()))
	value := `{"ttl":` + strconv.FormatInt(secs, 10) + `}`
	if reg != nil {
		out := append([]byte{}, raw[:reg.ValueStart]...)
		out = append(out, value...)
		return append(out, raw[reg.End:]...), time.Duration(secs) * time.Second, nil
	}
	i := bytes.IndexByte(raw, '{') + 1
	member := `"registration":` + value
	if len(members) > 0 {
		member += ","
	}
	out := append(append(append([]byte{}, raw[:i]...), member...), raw[i:]...)
	return out, time.Duration(secs) * time.Second, nil
}

// signedTTL is the registration.ttl a signer put in its document.
func signedTTL(raw []byte) time.Duration {
	var d struct {
		Registration struct {
			TTL float64 `json:"ttl"`
		} `json:"registration"`
	}
	if json.Unmarshal(raw, &d) != nil || d.Registration.TTL <= 0 || d.Registration.TTL > hub.MaxTTLSeconds {
		return 0
	}
	return time.Duration(math.Ceil(d.Registration.TTL)) * time.Second
}

// do sends one request and judges the answer.
func (p *Pusher) do(ctx context.Context, method, id string, body []byte) result {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, p.base+"/things/"+url.PathEscape(id), rd)
	if err != nil {
		return result{outcome: rejected, err: fmt.Errorf("cannot make a request for %q: %w", id, err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/td+json")
	}
	if p.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
	// PUT and DELETE are idempotent: net/http may then send the request
	// again on a new connection when a kept-alive one turns out closed
	// (a nil value marks it so without sending the header).
	req.Header["Idempotency-Key"] = nil
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return result{outcome: stopped, err: errStopped}
		}
		return result{outcome: retry, err: fmt.Errorf("%s %s: %w", method, id, err), request: true}
	}
	defer resp.Body.Close()
	detail := problemDetail(resp.Body)
	r := p.judge(method, resp)
	r.request = true
	if r.outcome != sent {
		r.err = fmt.Errorf("%s %s: the remote answered %s%s", method, id, resp.Status, detail)
	}
	return r
}

// probe reads GET {url}/things?limit=1 once, for the link's state alone:
// connected when it answers 2xx, down with the error otherwise. Nothing
// is retried: the next change is.
func (p *Pusher) probe(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, p.base+"/things?limit=1", nil)
	if err != nil {
		return
	}
	if p.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
	resp, err := p.cfg.Client.Do(req)
	if ctx.Err() != nil {
		return
	}
	now := p.cfg.Clock.Now()
	if err == nil {
		defer resp.Body.Close()
		detail := problemDetail(resp.Body)
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			err = fmt.Errorf("GET /things: the remote answered %s%s", resp.Status, detail)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st.State != hub.LinkConnecting {
		return // a push answered first
	}
	if err != nil {
		p.failed(err, now)
		p.st.State = hub.LinkDown
		p.log.Warn("cannot reach the remote directory", "err", err)
		return
	}
	p.st.State, p.st.LastSuccess = hub.LinkConnected, now
}

// judge maps the remote's status to an outcome.
func (p *Pusher) judge(method string, resp *http.Response) result {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return result{outcome: sent}
	case method == http.MethodDelete && (code == http.StatusNotFound || code == http.StatusGone):
		return result{outcome: sent} // already gone: done
	case code == http.StatusTooManyRequests:
		return result{outcome: retry, wait: retryAfter(resp.Header.Get("Retry-After"), p.cfg.Clock.Now())}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return result{outcome: refused}
	case code == http.StatusRequestTimeout || code >= 500 || code < 200 || (code >= 300 && code < 400):
		return result{outcome: retry}
	default: // 400, 409, 413, 415, 422 …: this document
		return result{outcome: rejected}
	}
}

// problemDetail is ": <detail>" of an RFC 9457 problem body, or "".
func problemDetail(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10)) // reuse the connection
	var pd struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &pd) != nil {
		return ""
	}
	if pd.Detail != "" {
		return ": " + pd.Detail
	}
	if pd.Title != "" {
		return ": " + pd.Title
	}
	return ""
}
