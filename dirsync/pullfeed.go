package dirsync

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// errNoFeed: the remote has no change feed (404, 405, 406, 501, or no
// text/event-stream); it is read again every Interval instead.
var errNoFeed = errors.New("the remote directory has no change feed")

// errResume: the remote refused to resume from Last-Event-ID (a
// directory that is not lmos-hub and tells a gap by an error).
var errResume = errors.New("the remote directory cannot resume the change feed")

// session is one connection to the remote: the change feed opened (from
// the last change applied, if any), a full read where one is due, then
// the changes as they come. progressed says it got that far once.
func (p *Puller) session(ctx context.Context) (progressed bool, err error) {
	feed, err := p.openFeed(ctx)
	if errors.Is(err, errResume) {
		p.lastID, p.needFull = "", true
		feed, err = p.openFeed(ctx)
	}
	if errors.Is(err, errNoFeed) {
		return p.poll(ctx)
	}
	if err != nil {
		return false, err
	}
	defer feed.close()
	if p.lastID == "" {
		p.needFull = true // a new feed: what happened before it is unknown
	}
	if p.needFull {
		// Changes during the read wait in the open feed and are applied
		// after it: the mirrors end as the remote is.
		if err := p.fullReadBeside(ctx, feed); err != nil {
			return false, err
		}
	}
	p.connected()
	return true, p.follow(ctx, feed)
}

// poll reads the whole remote every Interval (a remote without a feed).
func (p *Puller) poll(ctx context.Context) (progressed bool, err error) {
	p.log.Info("remote has no change feed; polling", "interval", p.cfg.Interval)
	for {
		if err := p.fullRead(ctx); err != nil {
			return progressed, err
		}
		progressed = true
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(p.cfg.Interval):
		}
	}
}

// feed is an open change feed.
type feed struct {
	body   io.ReadCloser
	rd     *bufio.Reader
	max    int
	idle   *time.Timer
	wait   time.Duration
	cancel context.CancelFunc
}

func (f *feed) close() {
	f.idle.Stop()
	f.cancel()
	f.body.Close()
}

// fullReadBeside is fullRead while the feed f waits unread: its idle
// timeout does not run meanwhile, since a long read is no silent feed.
func (p *Puller) fullReadBeside(ctx context.Context, f *feed) error {
	f.idle.Stop()
	defer f.idle.Reset(f.wait)
	return p.fullRead(ctx)
}

// openFeed opens GET /events (?diff=true unless the remote refused it),
// with Last-Event-ID when a change was applied before.
func (p *Puller) openFeed(parent context.Context) (*feed, error) {
	ctx, cancel := context.WithCancel(parent)
	u := p.base.String() + "/events"
	if p.diff {
		u += "?diff=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cannot make a request to %s: %w", u, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if p.lastID != "" {
		req.Header.Set("Last-Event-ID", p.lastID)
	}
	switch {
	case p.cfg.Authorize != nil:
		p.cfg.Authorize(req)
	case p.cfg.Token != "":
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cannot reach the remote directory: %w", err)
	}
	if err := p.feedRefused(resp); err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	f := &feed{body: resp.Body, rd: bufio.NewReaderSize(resp.Body, 64<<10), max: p.cfg.MaxTDBytes + enrichmentSlack,
		wait: p.cfg.IdleTimeout, cancel: cancel}
	f.idle = time.AfterFunc(f.wait, cancel)
	return f, nil
}

// feedRefused is why the answer to GET /events is no feed to follow.
func (p *Puller) feedRefused(resp *http.Response) error {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch s := resp.StatusCode; {
	case s == http.StatusOK && mt == "text/event-stream":
		return nil
	case s == http.StatusOK, s == http.StatusNotFound, s == http.StatusMethodNotAllowed,
		s == http.StatusNotAcceptable, s == http.StatusNotImplemented:
		return errNoFeed
	case s == http.StatusBadRequest && p.diff && p.lastID == "":
		p.diff = false // a directory without the diff parameter
		return &statusError{method: "GET", url: redact(resp.Request.URL), status: s, detail: "asking again without diff"}
	case s >= 400 && s < 500 && p.lastID != "" && s != http.StatusUnauthorized && s != http.StatusForbidden &&
		s != http.StatusTooManyRequests && s != http.StatusRequestTimeout:
		return errResume
	}
	return newStatusError(resp)
}

// event is one server-sent event; big says its data was over the limit
// (and was dropped).
type event struct {
	typ, id string
	data    []byte
	big     bool
}

// next reads the next event (keep-alives and comments skipped).
func (f *feed) next() (event, error) {
	var ev event
	for {
		line, big, err := f.line()
		if err != nil {
			return ev, err
		}
		f.idle.Reset(f.wait)
		if len(line) == 0 {
			if ev.typ != "" || ev.data != nil || ev.big {
				return ev, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.typ = string(value)
		case "id":
			ev.id = string(value)
		case "data":
			if big || ev.big || len(ev.data)+len(value) > f.max {
				ev.big, ev.data = true, nil
				continue
			}
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(append([]byte{}, ev.data...), value...)
		}
	}
}

// line reads one line without its end; big says it was longer than the
// limit (its content is then dropped).
func (f *feed) line() (line []byte, big bool, err error) {
	for {
		chunk, err := f.rd.ReadSlice('\n')
		if !big {
			if len(line)+len(chunk) > f.max+64 {
				big, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("the change feed ended: %w", err)
		}
		return bytes.TrimRight(line, "\r\n"), big, nil
	}
}

// follow applies the feed's changes until it ends.
func (p *Puller) follow(ctx context.Context, f *feed) error {
	for {
		ev, err := f.next()
		if err != nil {
			return err
		}
		switch ev.typ {
		case "lmos_resync":
			// The remote's log no longer holds what was missed.
			p.log.Info("remote change feed has a gap; reading it again", "data", string(ev.data))
			p.lastID, p.needFull = ev.id, true
			if err := p.fullReadBeside(ctx, f); err != nil {
				return err
			}
			continue
		case "error":
			return fmt.Errorf("the remote ended its change feed: %s", ev.data)
		case string(hub.EventCreated), string(hub.EventUpdated), string(hub.EventDeleted):
		default:
			continue
		}
		if ev.big {
			// Too large to take: read everything again, which reports it.
			p.needFull = true
			if err := p.fullReadBeside(ctx, f); err != nil {
				return err
			}
		} else if err := p.change(ctx, ev); err != nil {
			return err // not applied: resumed from before it
		}
		if ev.id != "" {
			p.lastID = ev.id
		}
		p.connected()
	}
}

// change applies one change: a creation's TD as the feed sent it, an
// update's as the remote serves it now, a deletion by deleting the
// mirror.
func (p *Puller) change(ctx context.Context, ev event) error {
	var data map[string]any
	if err := json.Unmarshal(ev.data, &data); err != nil {
		p.reject("", fmt.Errorf("a change of the remote's feed is not a JSON object: %w", err))
		return nil
	}
	id, _ := data["id"].(string)
	if id == "" {
		p.reject("", errors.New("a change of the remote's feed names no Thing"))
		return nil
	}
	if ev.typ == string(hub.EventDeleted) {
		if err := p.cfg.Registry.Unmirror(ctx, id, p.from); err == nil {
			p.received()
		}
		return nil
	}
	// A creation's TD as the feed sent it lacks the enrichment the remote
	// serves (lmos:origin, lmos:presence), which a Filter may judge by: a
	// filtered Puller reads the Thing as served instead.
	if _, isTD := data["title"]; ev.typ == string(hub.EventCreated) && isTD && p.cfg.Filter == nil {
		p.applyTD(ctx, ev.data, nil)
		return nil
	}
	raw, err := p.fetch(ctx, id)
	if err != nil {
		return err
	}
	if raw == nil { // gone since
		if err := p.cfg.Registry.Unmirror(ctx, id, p.from); err == nil {
			p.received()
		}
		return nil
	}
	p.applyTD(ctx, raw, nil)
	return nil
}

// fetch reads GET /things/{id} (nil when it is gone).
func (p *Puller) fetch(ctx context.Context, id string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.request(ctx, http.MethodGet, p.base.String()+"/things/"+url.PathEscape(id))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusGone:
		return nil, nil
	default:
		return nil, newStatusError(resp)
	}
	max := p.cfg.MaxTDBytes + enrichmentSlack
	raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the remote Thing %q: %w", id, err)
	}
	if len(raw) > max {
		raw = raw[:max+1] // applyTD reports it as too large
	}
	return raw, nil
}
