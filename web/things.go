package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Media types of the directory API.
const (
	mtTD         = "application/td+json"
	mtJSON       = "application/json"
	mtLDJSON     = "application/ld+json"
	mtMergePatch = "application/merge-patch+json"
)

func thingPath(id string) string { return "/things/" + url.PathEscape(id) }

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
	rev := s.reg.Revision()
	things, total := s.reg.List(offset, limit)
	etag := strconv.FormatUint(rev, 10)
	w.Header().Add("Link", `</things>; rel="canonical"; etag="`+etag+`"`)
	w.Header().Set("ETag", `"`+etag+`"`)
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
	s.streamThings(w, r, things, head, tail)
}

// listChunk bounds how many TDs are encoded per store read, so a listing of
// any size takes little memory and never holds a store transaction while
// the client reads.
const listChunk = 128

// streamThings writes head, the enriched TDs separated by commas, and tail.
func (s *Server) streamThings(w http.ResponseWriter, r *http.Request, things []*hub.Thing, head, tail []byte) {
	buf := append(make([]byte, 0, 64<<10), head...)
	n := 0
	for lo := 0; lo < len(things) || lo == 0; lo += listChunk {
		chunk := things[lo:min(lo+listChunk, len(things))]
		err := s.reg.EachEnrichedJSON(chunk, func(doc []byte) error {
			if n > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, doc...)
			n++
			return nil
		})
		if err != nil {
			if lo == 0 {
				s.writeError(w, r, err)
			} else {
				// The status is sent: end the body early so the client sees
				// a truncated document rather than a wrong one.
				panic(http.ErrAbortHandler)
			}
			return
		}
		if lo+listChunk >= len(things) {
			break
		}
		if _, err := w.Write(buf); err != nil {
			return
		}
		buf = buf[:0]
	}
	buf = append(buf, tail...)
	if len(things) <= listChunk {
		// Small answers go out in one piece, with a length.
		w.Header().Set("Content-Length", itoa(len(buf)))
	}
	_, _ = w.Write(buf)
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
		w.Header().Set("Content-Length", itoa(len(raw)))
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
	body, err := s.readBody(w, r, mtTD, mtJSON, mtLDJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id, err := s.reg.Create(r.Context(), body, hub.Origin{Source: hub.SourceHTTP})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", thingPath(id))
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) putThing(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r, mtTD, mtJSON, mtLDJSON)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	created, err := s.reg.PutIf(r.Context(), id, body, hub.Origin{Source: hub.SourceHTTP}, writePrecondition(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if created {
		w.Header().Set("Location", thingPath(id))
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

func (s *Server) searchJSONPath(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.reg.SearchJSONPath(r.URL.Query().Get("query"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, mtJSON, nodes)
}

func (s *Server) searchText(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", 20)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	hits, err := s.reg.SearchText(q.Get("q"), q.Get("type"), min(limit, 1000))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, mtJSON, hits)
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
