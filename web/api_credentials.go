package web

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// Membership credentials over HTTP (PROTOCOL §7): a member's credential,
// and the signed status list every credential names.

// statusListMaxAge is the Cache-Control max-age of the status list, the
// list's own ttl: a revocation reaches a verifier that caches it within
// this many seconds.
var statusListMaxAge = strconv.Itoa(int(hub.StatusListTTL / time.Second))

func (s *Server) credentialRoutes() {
	// Public whatever access.anonymous says: verifiers anywhere must read
	// it, and it tells only which entries are revoked.
	s.mux.HandleFunc("GET "+lmos.StatusListPath, s.statusList)
	s.mux.HandleFunc("GET "+lmos.StatusListPath+"/{gen}", s.statusList)
	s.mux.HandleFunc("GET /api/groups/{gid}/members/{id}/credential", s.memberCredential)
	s.mux.HandleFunc("POST /api/credentials/status/rotate", s.write(s.rotateStatusList))
}

// statusListPath is the path of the status list of generation gen
// (hub/statusrotate.go).
func statusListPath(gen int) string {
	if gen == 0 {
		return lmos.StatusListPath
	}
	return lmos.StatusListPath + "/" + strconv.Itoa(gen)
}

// statusList is GET /credentials/status/memberships[/{gen}]: the hub's
// signed revocation list, the same bytes until a bit changes or half its
// validity has passed; an earlier generation's, every entry revoked.
func (s *Server) statusList(w http.ResponseWriter, r *http.Request) {
	gen := 0
	if g := r.PathValue("gen"); g != "" {
		n, err := strconv.Atoi(g)
		if err != nil || n < 1 || strconv.Itoa(n) != g {
			s.writeError(w, r, hub.Errorf(hub.ENOTFOUND, "no status list %q", g))
			return
		}
		gen = n
	}
	b, err := s.reg.StatusListCredentialOf(gen)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "public, max-age="+statusListMaxAge)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeBytes(w, http.StatusOK, vc.MediaType, append(b, '\n'))
}

// memberCredential is GET /api/groups/{gid}/members/{id}/credential: the
// member's credential (renewed when expired), for a token of scope
// operate or admin, or the member Thing itself. The credential proves
// membership to whoever holds it, so an anonymous client never gets it,
// whatever access.anonymous allows.
func (s *Server) memberCredential(w http.ResponseWriter, r *http.Request) {
	gid, id := r.PathValue("gid"), r.PathValue("id")
	p, err := s.principalOf(r)
	if err == nil {
		err = mayReadCredential(p, id)
	}
	if err == nil {
		err = hub.ValidateGroupID(gid)
	}
	if err != nil {
		s.refuse(w, r, err)
		return
	}
	cred, err := s.reg.MemberCredential(gid, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeBytes(w, http.StatusOK, vc.MediaType, append(cred, '\n'))
}

// mayReadCredential: the Thing itself (also by a token bound to it,
// whatever its scope: the holder is that member on its channels), or a
// token of scope operate or admin bound to no Thing (a bound one speaks
// for its Thing only, and another member's credential would let it pass
// for that member).
func mayReadCredential(p hub.Principal, thing string) error {
	switch m := hub.MemberOf(p); {
	case m != "" && m == thing:
		return nil
	case m != "":
		return hub.Errorf(hub.EFORBIDDEN, "%s speaks for Thing %q: it reads that Thing's membership credentials only", p, m)
	case p.Kind == hub.ByToken && p.Token.EffectiveScope() != hub.ScopeRead:
		return nil
	case p.Kind == hub.Anonymous:
		return hub.Errorf(hub.EUNAUTHORIZED, "a membership credential is given to its member or with a token of scope operate or admin")
	}
	return hub.Errorf(hub.EFORBIDDEN, "a membership credential is given to its member or with a token of scope operate or admin")
}

// rotateStatusList is POST /api/credentials/status/rotate (admin): a new
// status list generation, every credential issued before it revoked and
// every member given a fresh entry (hub/statusrotate.go). It recovers a
// list whose entries are all revoked and not yet reusable.
func (s *Server) rotateStatusList(w http.ResponseWriter, r *http.Request) {
	rot, err := s.reg.RotateStatusList(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lmos.MediaJSON, map[string]any{"generation": rot.Generation, "members": rot.Members,
		"statusList": statusListPath(rot.Generation)})
}
