package web

import (
	"net/http"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// checkContentCoding refuses a request body in a content coding the hub does
// not decode (W3C WoT Discovery tdd-http-unsupported-feature): read as it
// is, a gzip TD would be blamed on the client as invalid JSON. The 415
// carries Accept-Encoding: identity, the codings that would have been
// accepted (RFC 9110 §15.5.16, §12.5.3).
func checkContentCoding(w http.ResponseWriter, r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c == "" || c == "identity" {
				continue
			}
			w.Header().Set("Accept-Encoding", "identity")
			return hub.Errorf(hub.EUNSUPPORTED, "Content-Encoding %q is not supported; send the body without a content coding", c)
		}
	}
	return nil
}
