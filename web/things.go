package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Media types of the directory API.
const (
	mtTD         = lmos.MediaTD
	mtLDJSON     = lmos.MediaLDJSON
	mtMergePatch = "application/merge-patch+json"
)

func (s *Server) listThings(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err := intParam(q, "offset", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := intParam(q, "limit", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	format := q.Get("format")
	if format != "" && format != "array" && format != "collection" {
		s.writeError(w, r, hub.Errorf(hub.EINVALID, "format must be array or collection, not %q", format))
		return
	}
	// The documents must come from the store state the page was read at,
	// all in one store transaction; a write committed in between (its
	// install into the index follows at once) means reading the page
	// again.
	var (
		page  hub.Page
		first []byte
		err2  error
	)
	for try := 0; ; try++ {
		page = s.reg.Page(offset, limit)
		// Before the documents are read: an unchanged page costs nothing.
		// Only then: the tag's work widens the window in which a write
		// makes the page stale.
		if r.Header.Get("If-None-Match") != "" && notModified(w, r, `W/"`+listTag(&page)+`"`) {
			return
		}
		first, err2 = s.pageDocs(&page)
		if !errors.Is(err2, hub.ErrStale) || try == staleRetries {
			break
		}
		select { // the index follows the store within one install
		case <-page.Installed:
		case <-r.Context().Done():
			return
		}
	}
	if err2 != nil {
		if errors.Is(err2, hub.ErrStale) {
			err2 = hub.Errorf(hub.EUNAVAILABLE, "the collection changes too fast to be read; try again")
		}
		s.writeError(w, r, err2)
		return
	}
	things, total := page.Things, page.Total
	// The collection's revision (TDD §7.3.2.1.2); the ETag also covers
	// what changes without one.
	w.Header().Add("Link", `</things>; rel="canonical"; etag="`+page.Tag()+`"`)
	w.Header().Set("ETag", `W/"`+listTag(&page)+`"`)
	next := ""
	if limit > 0 && offset+len(things) < total {
		next = "/things?offset=" + strconv.Itoa(offset+len(things)) + "&limit=" + strconv.Itoa(limit)
		if format != "" {
			next += "&format=" + format
		}
		w.Header().Add("Link", "<"+next+`>; rel="next"`)
	}
	w.Header().Set("Content-Type", mtLDJSON)
	var head, tail []byte
	if format == "collection" {
		id, _ := json.Marshal(r.URL.RequestURI())
		head = fmt.Appendf(nil, `{"@context":%q,"@type":"ThingCollection","@id":%s,"total":%d,"members":[`, hub.ContextDiscovery, id, total)
		tail = []byte("]}\n")
		if next != "" {
			nj, _ := json.Marshal(next)
			tail = fmt.Appendf(nil, `],"next":%s}`+"\n", nj)
		}
	} else {
		head, tail = []byte("["), []byte("]\n")
	}
	writePage(w, head, first, tail)
}

// staleRetries bounds how often a list request reads the page again when
// writes keep committing between the index read and the store read.
const staleRetries = 16

// pageDocs returns the comma-separated enriched TDs of page, read in one
// store transaction at the page's state (hub.ErrStale when the store has
// moved on). The whole page is encoded before anything is written: the
// transaction never waits for the network, and a body never mixes two
// states of the collection.
func (s *Server) pageDocs(page *hub.Page) ([]byte, error) {
	var buf []byte
	err := s.reg.PageJSON(page, 0, len(page.Things), func(doc []byte) error {
		if len(buf) > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, doc...)
		return nil
	})
	return buf, err
}

// writePage writes head, the page's documents and tail in one piece, with
// its length.
func writePage(w http.ResponseWriter, head, docs, tail []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(docs)+len(tail)))
	_, _ = w.Write(head)
	_, _ = w.Write(docs)
	_, _ = w.Write(tail)
}

func intParam(q url.Values, name string, def int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, hub.Errorf(hub.EINVALID, "%s must be a non-negative integer, not %q", name, v)
	}
	return n, nil
}

func (s *Server) getThing(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	switch r.URL.Query().Get("enriched") {
	case "false":
		raw, err := s.reg.Raw(id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if notModified(w, r, `"`+hub.VersionTag(raw)+`"`) {
			return
		}
		w.Header().Set("Content-Type", mtTD)
		w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
		_, _ = w.Write(raw)
	case "", "true":
		doc, _, tag, err := s.reg.EnrichedTagged(id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if notModified(w, r, `W/"`+tag+`"`) {
			return
		}
		writeBytes(w, http.StatusOK, mtTD, doc)
	default:
		s.writeError(w, r, hub.Errorf(hub.EINVALID, "enriched must be true or false"))
	}
}

func (s *Server) createThing(w http.ResponseWriter, r *http.Request) {
	body, err := s.readTD(w, r, mtTD, lmos.MediaJSON, mtLDJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id, err := s.reg.Create(r.Context(), body, hub.Origin{Source: hub.SourceHTTP, Admin: true})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", lmos.ThingPath(id))
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) putThing(w http.ResponseWriter, r *http.Request) {
	body, err := s.readTD(w, r, mtTD, lmos.MediaJSON, mtLDJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	origin := hub.Origin{Source: hub.SourceHTTP, Admin: true}
	if byProof(r) && !bytes.Contains(body, []byte(`"proof"`)) {
		// Nothing could authenticate it: the answer of a missing token.
		_, err := s.tokens.Verify("")
		s.writeError(w, r, err)
		return
	}
	if byProof(r) {
		// No token: the proof by the id's bound key is the credential; its
		// verification is charged to the client (security.verifyRate).
		origin = hub.Origin{Source: hub.SourceHTTP, ByProof: true, Addr: clientAddr(r),
			JoinOpen: s.cfg.Admission == nil || s.cfg.Admission.JoinOpen()}
	}
	created, err := s.reg.PutIf(r.Context(), id, body, origin, writePrecondition(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if created && s.cfg.Admission != nil {
		// A join of this id that waited for approval is settled by this
		// write; the registration stands whatever that costs.
		if err := s.cfg.Admission.Superseded(id); err != nil {
			s.log.Warn("cannot drop the pending join of a Thing registered over HTTP", "id", id, "err", err)
		}
	}
	if created {
		w.Header().Set("Location", lmos.ThingPath(id))
		w.WriteHeader(http.StatusCreated)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) patchThing(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r, mtMergePatch)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.reg.PatchIf(r.Context(), r.PathValue("id"), body, writePrecondition(r)); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteThing(w http.ResponseWriter, r *http.Request) {
	if err := s.reg.DeleteIf(r.Context(), r.PathValue("id"), writePrecondition(r)); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// searchJSONPath streams the answer (PROTOCOL §10, "Limits: search"). The
// first searchCommitBytes are held back, so a query that hits a budget
// early gets a clean problem answer; a budget hit after the status went
// out aborts the response, so the client sees a broken body, never a
// shorter array that looks whole.
func (s *Server) searchJSONPath(w http.ResponseWriter, r *http.Request) {
	body := &heldBody{w: w}
	err := s.reg.StreamJSONPath(r.Context(), clientAddr(r), r.URL.Query().Get("query"), body)
	if err == nil {
		body.finish()
		return
	}
	gone := r.Context().Err() != nil // nobody to answer, nothing refused
	switch {
	case !body.sent && gone:
		return
	case !body.sent:
		s.writeSearchError(w, r, err)
		return
	case !gone:
		s.countRefusal("http", err)
		s.log.Info("search aborted after the answer began", "path", r.URL.Path, "err", err)
	}
	// Never end an answer that was cut short as if it were whole.
	panic(http.ErrAbortHandler)
}

// writeSearchError answers a refused search; a client over its concurrent
// searches may retry as soon as one of them ends.
func (s *Server) writeSearchError(w http.ResponseWriter, r *http.Request, err error) {
	if hub.ErrorCode(err) == hub.ERATELIMIT {
		w.Header().Set("Retry-After", "1")
	}
	s.writeError(w, r, err)
}

// searchCommitBytes is how much of a search answer is held before the
// status is sent.
const searchCommitBytes = 64 << 10

// heldBody holds the start of an answer and commits a 200 once
// searchCommitBytes are there.
type heldBody struct {
	w    http.ResponseWriter
	buf  []byte
	sent bool
}

func (b *heldBody) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) < searchCommitBytes {
		return len(p), nil
	}
	if !b.sent {
		b.w.Header().Set("Content-Type", lmos.MediaJSON)
		b.w.WriteHeader(http.StatusOK)
		b.sent = true
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return len(p), err
}

// finish writes what is held: a short answer goes out whole with its
// Content-Length, as before streaming.
func (b *heldBody) finish() {
	if !b.sent {
		writeBytes(b.w, http.StatusOK, lmos.MediaJSON, b.buf)
		return
	}
	_, _ = b.w.Write(b.buf)
}

func (s *Server) searchText(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", 20)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	hits, err := s.reg.SearchTextFor(r.Context(), clientAddr(r), q.Get("q"), q.Get("type"), min(limit, 1000))
	if err != nil {
		s.writeSearchError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, hits)
}

// readAll reads r, pre-sizing the buffer from Content-Length when known.
func readAll(r io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 {
		buf.Grow(int(size))
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// listTag is the opaque tag of a page of the listing: the collection state
// (hub.Page.Tag) and the hub's metadata of the page's Things, since a
// presence change is no new revision yet changes lmos:presence in the
// body. It is weak (W/): registration.retrieved differs in every response.
func listTag(p *hub.Page) string {
	h := sha256.New()
	for _, t := range p.Things {
		meta, _ := json.Marshal(t.Meta)
		h.Write(meta)
		h.Write([]byte{0})
	}
	return p.Tag() + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}
