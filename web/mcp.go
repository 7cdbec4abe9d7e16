package web

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// The MCP door (PROTOCOL §11) is app's handler (mcpdoor) behind this
// server's checks: Host like every route, then Origin as the MCP
// transport requires of every request, token or not (a page of another
// site must not reach the door through a visitor's browser), then who
// asks, which the door reads from the request's context.

func (s *Server) mcpRoutes() {
	if s.cfg.MCP == nil {
		return
	}
	s.mux.HandleFunc("/mcp", s.serveMCP)
}

func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	if err := s.mcpOrigin(r); err != nil {
		s.refuseMCP(w, http.StatusForbidden, err)
		return
	}
	p, err := s.principalOf(r)
	if err != nil {
		if hub.ErrorCode(err) == hub.EUNAUTHORIZED {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lmos-hub"`)
		}
		s.refuseMCP(w, http.StatusUnauthorized, err)
		return
	}
	// A notification stream never ends by itself: it ends with the
	// server's streams (CloseStreams), so that shutting down does not
	// wait for it.
	ctx, cancel := s.proxyContext(r, 0)
	defer cancel()
	s.cfg.MCP.ServeHTTP(&frameWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: s.cfg.SSEWriteTimeout},
		r.WithContext(hub.ContextWithPrincipal(ctx, p)))
}

// mcpOrigin accepts a request without Origin (not a browser page) or
// from the hub's own origin or one of http.allowedOrigins.
func (s *Server) mcpOrigin(r *http.Request) error {
	if origin, ok := s.originAllowed(r); !ok {
		return hub.Errorf(hub.EFORBIDDEN, "the MCP endpoint refuses requests from the page at %s (Origin); allow it with http.allowedOrigins", lmos.Truncate(origin, 128))
	}
	return nil
}

// refuseMCP answers a request the door never sees: a JSON-RPC error, as
// MCP clients read them.
func (s *Server) refuseMCP(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32000, "message": hub.ProblemOf(err).Detail},
	})
}

// frameWriter gives each write of a long answer (an MCP event stream) its
// own deadline, as the hub's event streams have: a client that stops
// reading is cut off, one that reads slowly but steadily is not.
type frameWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (f *frameWriter) Write(b []byte) (int, error) {
	_ = f.rc.SetWriteDeadline(time.Now().Add(f.d))
	return f.ResponseWriter.Write(b)
}

func (f *frameWriter) Flush() {
	_ = f.rc.SetWriteDeadline(time.Now().Add(f.d))
	_ = f.rc.Flush()
}

func (f *frameWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
