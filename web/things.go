package web

import (
	"bytes"
	"encoding/json"
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
	docs, _, err := s.reg.AppendEnrichedJSON(make([]byte, 0, 2048*len(things)+2), things, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
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
	if format == "collection" {
		coll := map[string]any{
			"@context": hub.ContextDiscovery,
			"@type":    "ThingCollection",
			"@id":      r.URL.RequestURI(),
			"total":    total,
			"members":  json.RawMessage(docs),
		}
		if next != "" {
			coll["next"] = next
		}
		writeJSON(w, http.StatusOK, mtLDJSON, coll)
		return
	}
	writeBytes(w, http.StatusOK, mtLDJSON, docs)
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
		w.Header().Set("Content-Type", mtTD)
		w.Header().Set("Content-Length", itoa(len(raw)))
		_, _ = w.Write(raw)
	case "", "true":
		t, err := s.reg.Get(id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		doc, n, err := s.reg.AppendEnrichedJSON(nil, []*hub.Thing{&t}, false)
		if err == nil && n == 0 {
			err = hub.Errorf(hub.ENOTFOUND, "no Thing with id %q", id) // deleted meanwhile
		}
		if err != nil {
			s.writeError(w, r, err)
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
	created, err := s.reg.Put(r.Context(), id, body, hub.Origin{Source: hub.SourceHTTP})
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
	if err := s.reg.Patch(r.Context(), r.PathValue("id"), body); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteThing(w http.ResponseWriter, r *http.Request) {
	if err := s.reg.Delete(r.Context(), r.PathValue("id")); err != nil {
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
