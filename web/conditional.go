package web

import (
	"net/http"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Conditional requests on /things/{id} (RFC 9110 §13). The document as
// submitted (?enriched=false) has a strong ETag over its exact bytes; the
// enriched TD has a weak one, since registration.retrieved differs in every
// response. Writes compare If-Match strongly (a weak tag never matches) and
// the registry's write loop does the comparison, so a check and its write
// are one step for concurrent writers.

// entityTags parses a field value of If-Match / If-None-Match: "*" or a
// list of entity tags. It returns whether it is "*", and the opaque tags with whether
// each was weak. A malformed member is skipped: it can match nothing.
func entityTags(v string) (star bool, tags []string, weak []bool) {
	v = strings.TrimSpace(v)
	if v == "*" {
		return true, nil, nil
	}
	for v != "" {
		v = strings.TrimLeft(v, " \t,")
		w := strings.HasPrefix(v, "W/")
		if w {
			v = v[2:]
		}
		if !strings.HasPrefix(v, `"`) {
			// skip to the next comma
			i := strings.IndexByte(v, ',')
			if i < 0 {
				break
			}
			v = v[i+1:]
			continue
		}
		end := strings.IndexByte(v[1:], '"')
		if end < 0 {
			break
		}
		tags, weak = append(tags, v[1:1+end]), append(weak, w)
		v = v[end+2:]
	}
	return false, tags, weak
}

// writePrecondition reads If-Match and If-None-Match for a write.
func writePrecondition(r *http.Request) hub.Precondition {
	var c hub.Precondition
	if vs := r.Header.Values("If-Match"); len(vs) > 0 {
		c.IfMatch = true
		star, tags, weak := entityTags(strings.Join(vs, ","))
		c.IfMatchAny = star
		for i, t := range tags {
			if !weak[i] { // strong comparison (RFC 9110 §13.1.1)
				c.MatchTags = append(c.MatchTags, t)
			}
		}
	}
	if vs := r.Header.Values("If-None-Match"); len(vs) > 0 {
		c.IfNoneMatch = true
		c.IfNoneMatchAny, c.NoneMatchTags, _ = entityTags(strings.Join(vs, ","))
	}
	return c
}

// notModified answers 304 when If-None-Match names etag (weak comparison,
// RFC 9110 §13.1.2) or is "*", having set ETag either way. It reports
// whether it answered.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	vs := r.Header.Values("If-None-Match")
	if len(vs) == 0 {
		return false
	}
	star, tags, _ := entityTags(strings.Join(vs, ","))
	opaque := strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	match := star
	for _, t := range tags {
		match = match || t == opaque
	}
	if !match {
		return false
	}
	w.WriteHeader(http.StatusNotModified)
	return true
}
