package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// writeError answers with the problem for err and logs what the client
// does not see.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := hub.ProblemOf(err)
	p.Instance = instanceOf(r)
	status := p.Status
	s.countRefusal("http", err)
	switch {
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		// A Thing that is away or slow is news, not a fault of the hub.
		s.log.Info("request not served", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	case status >= 500:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	switch status {
	case http.StatusUnauthorized:
		v := `Bearer realm="lmos-hub"`
		if r.Header.Get("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", v)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case http.StatusMethodNotAllowed:
		// The router refuses reading a write-only property and writing a
		// read-only one; every other 405 has set Allow already.
		if w.Header().Get("Allow") == "" {
			if r.Method == http.MethodPut {
				w.Header().Set("Allow", "GET, HEAD")
			} else {
				w.Header().Set("Allow", "PUT")
			}
		}
	}
	w.Header().Set("Content-Type", lmos.MediaProblem)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// countRefusal counts a request refused on door ("http" or "ws") by
// reason: the limit that refused it or the problem code
// (lmos_http_refused_total, lmos_ws_refused_total).
func (s *Server) countRefusal(door string, err error) {
	s.metrics.GetOrCreateCounter(fmt.Sprintf(`lmos_%s_refused_total{reason=%q}`, door, hub.RefusalReason(err))).Inc()
}

// writeJSON answers with v as JSON under contentType.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "cannot encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeBytes answers with an encoded body.
func writeBytes(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// instanceOf is a problem's instance for r: its path and query, without
// the query when it carries a token (/ws?token=), so no answer echoes a
// secret into a client's logs.
func instanceOf(r *http.Request) string {
	if r.URL.Query().Has("token") {
		return r.URL.EscapedPath()
	}
	return r.URL.RequestURI()
}
