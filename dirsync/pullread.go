package dirsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// statusError is a remote's answer other than the one expected.
type statusError struct {
	method, url string
	status      int
	retryAfter  time.Duration
	detail      string
}

func (e *statusError) Error() string {
	msg := fmt.Sprintf("%s %s: %d %s", e.method, e.url, e.status, http.StatusText(e.status))
	switch e.status {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (check the token the remote expects)"
	}
	if e.detail != "" {
		msg += ": " + e.detail
	}
	return msg
}

// newStatusError reads what a refusal says (a problem's detail, bounded).
func newStatusError(resp *http.Response) *statusError {
	e := &statusError{method: resp.Request.Method, url: redact(resp.Request.URL), status: resp.StatusCode,
		retryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var prob struct{ Detail string }
	if json.Unmarshal(body, &prob) == nil && prob.Detail != "" {
		e.detail = prob.Detail
	}
	return e
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// request makes a request to the remote, authorized.
func (p *Puller) request(ctx context.Context, method, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot make a request to %s: %w", u, err)
	}
	switch {
	case p.cfg.Authorize != nil:
		p.cfg.Authorize(req)
	case p.cfg.Token != "":
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the remote directory: %w", err)
	}
	return resp, nil
}

// fullRead reads every remote Thing (following the pages), mirrors those
// wanted and deletes the mirrors the remote no longer lists or that no
// longer match. A read that stopped at MaxThings deletes nothing.
func (p *Puller) fullRead(ctx context.Context) error {
	seen := make(map[string]bool)
	next := p.base.String() + "/things?limit=" + strconv.Itoa(p.cfg.PageSize)
	offset, count, truncated := 0, 0, false
	for next != "" && !truncated {
		items, link, err := p.page(ctx, next)
		if err != nil {
			return err
		}
		repeated := false
		for _, raw := range items {
			if count >= p.cfg.MaxThings {
				truncated = true
				p.reject("", fmt.Errorf("the remote lists more than %d Things; only the first are mirrored", p.cfg.MaxThings))
				break
			}
			count++
			if _, again := p.applyTD(ctx, raw, seen); again {
				repeated = true // a remote ignoring offset: the same page again
			}
		}
		offset += len(items)
		next = link
		if next == "" && len(items) == p.cfg.PageSize && !repeated {
			// No Link rel=next: page by offset as the Discovery spec allows.
			next = p.base.String() + "/things?offset=" + strconv.Itoa(offset) + "&limit=" + strconv.Itoa(p.cfg.PageSize)
		}
		if len(items) == 0 {
			next = ""
		}
	}
	if !truncated {
		p.dropUnseen(ctx, seen)
	}
	p.needFull = false
	p.connected()
	select {
	case <-p.synced:
	default:
		close(p.synced)
	}
	return nil
}

// dropUnseen deletes the mirrors of Things the full read did not find.
func (p *Puller) dropUnseen(ctx context.Context, seen map[string]bool) {
	for _, id := range p.cfg.Registry.MirroredFrom(p.from) {
		if seen[id] {
			continue
		}
		if err := p.cfg.Registry.Unmirror(ctx, id, p.from); err != nil && hub.ErrorCode(err) != hub.ENOTFOUND {
			p.reject(id, err)
			continue
		}
		p.received()
	}
}

// page reads one page of /things: a JSON array of TDs, or a
// ThingCollection object (members, next); link is the next page's URL.
func (p *Puller) page(ctx context.Context, u string) (items []json.RawMessage, link string, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	resp, err := p.request(ctx, http.MethodGet, u)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", newStatusError(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.cfg.MaxPageBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("cannot read %s: %w", redact(resp.Request.URL), err)
	}
	if int64(len(body)) > p.cfg.MaxPageBytes {
		return nil, "", fmt.Errorf("a page of %s is larger than %d bytes", redact(resp.Request.URL), p.cfg.MaxPageBytes)
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var coll struct {
			Members []json.RawMessage `json:"members"`
			Next    string            `json:"next"`
		}
		err = json.Unmarshal(body, &coll)
		items, link = coll.Members, coll.Next
	} else {
		err = json.Unmarshal(body, &items)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s is no list of Thing Descriptions: %w", redact(resp.Request.URL), err)
	}
	if l := nextLink(resp.Header.Values("Link")); l != "" {
		link = l
	}
	if link != "" {
		ref, err := resp.Request.URL.Parse(link)
		if err != nil {
			return nil, "", fmt.Errorf("cannot follow the next page %q: %w", link, err)
		}
		link = ref.String()
	}
	return items, link, nil
}

// nextLink finds the target of rel="next" in Link headers (RFC 8288).
func nextLink(values []string) string {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			target, params, ok := strings.Cut(part, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, prm := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(prm), "=")
				if strings.EqualFold(k, "rel") && slicesContainsFold(strings.Fields(strings.Trim(v, `"`)), "next") {
					return target[1 : len(target)-1]
				}
			}
		}
	}
	return ""
}

func slicesContainsFold(list []string, s string) bool {
	for _, e := range list {
		if strings.EqualFold(e, s) {
			return true
		}
	}
	return false
}

// applyTD mirrors one remote TD when it is wanted, or deletes its mirror
// when it is not (any more); seen records the ids wanted (and, with a
// NUL suffix, every id read, to notice a page served twice). It returns
// the TD's id ("" when it has none) and whether it was read before.
func (p *Puller) applyTD(ctx context.Context, raw []byte, seen map[string]bool) (id string, again bool) {
	if len(raw) > p.cfg.MaxTDBytes+enrichmentSlack {
		p.reject("", fmt.Errorf("a remote Thing Description of %d bytes is over the limit (registry.maxTDBytes = %d)", len(raw), p.cfg.MaxTDBytes))
		return "", false
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		p.reject("", fmt.Errorf("a remote Thing Description is not a JSON object: %w", err))
		return "", false
	}
	id, _ = doc["id"].(string)
	if id == "" {
		p.reject("", errors.New("a remote Thing Description has no id"))
		return "", false
	}
	again = seen != nil && seen[id+"\x00"]
	if seen != nil {
		seen[id+"\x00"] = true
	}
	if !p.wanted(doc) {
		if err := p.cfg.Registry.Unmirror(ctx, id, p.from); err == nil {
			p.received()
		}
		return id, false
	}
	if seen != nil {
		seen[id] = true
	}
	if again {
		return id, true
	}
	if _, err := p.cfg.Registry.Mirror(ctx, id, raw, p.from); err != nil {
		if hub.ErrorCode(err) == hub.ECONFLICT {
			// A Thing of this hub (this hub's own Things pushed there
			// come back), or one online elsewhere: not this link's fault.
			p.log.Debug("remote thing not mirrored", "id", id, "err", err)
			return id, false
		}
		p.reject(id, err)
		return id, false
	}
	p.received()
	return id, false
}

// wanted applies Filter and JSONPath to a remote TD.
func (p *Puller) wanted(doc map[string]any) bool {
	if p.cfg.Filter != nil && !p.cfg.Filter(doc) {
		return false
	}
	return p.path == nil || len(p.path.Select([]any{doc})) > 0
}
