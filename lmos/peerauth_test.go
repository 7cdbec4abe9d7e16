package lmos_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

func peerKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

// TestPeerAuthRoundTrip: a signed request verifies as its signer's DID, at
// its time and within the skew either way.
func TestPeerAuthRoundTrip(t *testing.T) {
	priv := peerKey(t)
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	at := time.Unix(1_800_000_000, 0)
	h := lmos.SignPeer(priv, "GET", "hub-a:8080", "/things?offset=2", nil, at)
	if !strings.HasPrefix(h, `LMOS-Peer keyId="`+did+`",created=1800000000,digest="`+lmos.PeerDigest(nil)+`",signature="`) {
		t.Fatalf("header %q", h)
	}
	for _, now := range []time.Time{at, at.Add(lmos.PeerSkew), at.Add(-lmos.PeerSkew)} {
		got, err := lmos.VerifyPeer(h, "GET", "hub-a:8080", "/things?offset=2", nil, now)
		if err != nil || got != did {
			t.Fatalf("at %s: %q, %v", now.Sub(at), got, err)
		}
	}
}

// TestPeerAuthTampered: changing any covered part, or the signer, refuses.
func TestPeerAuthTampered(t *testing.T) {
	priv := peerKey(t)
	at := time.Unix(1_800_000_000, 0)
	h := lmos.SignPeer(priv, "POST", "hub-a:8080", "/proxy/x/actions/go?q=1", nil, at)
	other := proof.DID(peerKey(t).Public().(ed25519.PublicKey))
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	cases := map[string]struct{ h, method, host, target string }{
		"method":  {h, "GET", "hub-a:8080", "/proxy/x/actions/go?q=1"},
		"host":    {h, "POST", "hub-b:8080", "/proxy/x/actions/go?q=1"},
		"path":    {h, "POST", "hub-a:8080", "/proxy/y/actions/go?q=1"},
		"query":   {h, "POST", "hub-a:8080", "/proxy/x/actions/go?q=2"},
		"created": {strings.Replace(h, "created=1800000000", "created=1800000001", 1), "POST", "hub-a:8080", "/proxy/x/actions/go?q=1"},
		"keyId":   {strings.Replace(h, did, other, 1), "POST", "hub-a:8080", "/proxy/x/actions/go?q=1"},
	}
	for name, c := range cases {
		if _, err := lmos.VerifyPeer(c.h, c.method, c.host, c.target, nil, at); !errors.Is(err, lmos.ErrPeerSignature) {
			t.Errorf("%s changed: %v, want ErrPeerSignature", name, err)
		}
	}
	// The body is covered: a signed POST replayed with another body (or
	// none) is refused.
	withBody := lmos.SignPeer(priv, "POST", "hub-a:8080", "/proxy/x/actions/go?q=1", []byte(`{"n":1}`), at)
	if _, err := lmos.VerifyPeer(withBody, "POST", "hub-a:8080", "/proxy/x/actions/go?q=1", []byte(`{"n":1}`), at); err != nil {
		t.Fatalf("the signed body: %v", err)
	}
	for _, other := range [][]byte{[]byte(`{"n":2}`), nil} {
		if _, err := lmos.VerifyPeer(withBody, "POST", "hub-a:8080", "/proxy/x/actions/go?q=1", other, at); !errors.Is(err, lmos.ErrPeerSignature) {
			t.Errorf("body %q instead of the signed one: %v, want ErrPeerSignature", other, err)
		}
	}
	sig := h[strings.Index(h, `signature="`)+11 : len(h)-1]
	flipped := []byte(sig)
	flipped[3] ^= 'A' ^ 'B'
	if flipped[3] == sig[3] {
		flipped[3] = 'C'
	}
	bad := strings.Replace(h, sig, string(flipped), 1)
	if _, err := lmos.VerifyPeer(bad, "POST", "hub-a:8080", "/proxy/x/actions/go?q=1", nil, at); err == nil {
		t.Error("a changed signature verified")
	}
}

// TestPeerAuthStale: created more than the skew away, either way, refuses.
func TestPeerAuthStale(t *testing.T) {
	priv := peerKey(t)
	at := time.Unix(1_800_000_000, 0)
	h := lmos.SignPeer(priv, "GET", "h", "/things", nil, at)
	for _, now := range []time.Time{at.Add(lmos.PeerSkew + time.Second), at.Add(-lmos.PeerSkew - time.Second)} {
		_, err := lmos.VerifyPeer(h, "GET", "h", "/things", nil, now)
		if !errors.Is(err, lmos.ErrPeerStale) || !strings.Contains(err.Error(), "clock skew") {
			t.Errorf("at %s: %v", now.Sub(at), err)
		}
	}
}

// TestPeerAuthMalformed: each malformed header is refused as malformed
// with a message that says what is wrong.
func TestPeerAuthMalformed(t *testing.T) {
	priv := peerKey(t)
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	good := lmos.SignPeer(priv, "GET", "h", "/", nil, time.Unix(100, 0))
	sig := good[strings.Index(good, `signature="`)+11 : len(good)-1]
	cases := map[string]struct{ h, want string }{
		"bearer":         {"Bearer x", "scheme"},
		"empty":          {"LMOS-Peer ", "each once"},
		"no keyId":       {`LMOS-Peer created=100,signature="` + sig + `"`, "all required"},
		"no signature":   {`LMOS-Peer keyId="` + did + `",created=100`, "all required"},
		"twice":          {`LMOS-Peer keyId="` + did + `",keyId="` + did + `",created=100,signature="` + sig + `"`, "each once"},
		"unquoted":       {`LMOS-Peer keyId=` + did + `,created=100,signature="` + sig + `"`, "quoted"},
		"created text":   {`LMOS-Peer keyId="` + did + `",created=soon,signature="` + sig + `"`, "unix seconds"},
		"short sig":      {`LMOS-Peer keyId="` + did + `",created=100,signature="AAAA"`, "64 bytes"},
		"padded sig":     {`LMOS-Peer keyId="` + did + `",created=100,signature="` + sig + `=="`, "64 bytes"},
		"unknown":        {`LMOS-Peer keyId="` + did + `",created=100,signature="` + sig + `",alg="x"`, "unknown parameter"},
		"not did:key":    {`LMOS-Peer keyId="did:web:x",created=100,signature="` + sig + `"`, "not an Ed25519 did:key"},
		"vm not did":     {`LMOS-Peer keyId="` + did + `#` + did[8:] + `",created=100,signature="` + sig + `"`, "not an Ed25519 did:key"},
		"too long":       {"LMOS-Peer " + strings.Repeat("a", 600), "bytes long"},
		"missing equals": {`LMOS-Peer keyId`, "each once"},
	}
	for name, c := range cases {
		_, err := lmos.VerifyPeer(c.h, "GET", "h", "/", nil, time.Unix(100, 0))
		if !errors.Is(err, lmos.ErrPeerMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want malformed saying %q", name, err, c.want)
		}
	}
}

// TestPeerAuthOverHTTP: SignPeerRequest on a client request verifies on the
// server from what the server received (Host, request target).
func TestPeerAuthOverHTTP(t *testing.T) {
	priv := peerKey(t)
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, paired, err := lmos.VerifyPeerRequest(r, time.Now(), 1<<20, func(string) bool { return true })
		if err != nil {
			d = err.Error()
		} else if !paired {
			d = "not paired"
		}
		if b, _ := io.ReadAll(r.Body); r.Method == "POST" && string(b) != `{"n":1}` {
			d = "the handler read " + string(b)
		}
		got <- d
	}))
	defer srv.Close()
	req, _ := http.NewRequest("DELETE", srv.URL+"/things/urn:x%2Fy?a=b%20c", nil)
	if err := lmos.SignPeerRequest(req, priv, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := <-got; d != did {
		t.Fatalf("server verified %q, want %q", d, did)
	}
	// A body is signed through its digest, checked by the server, and
	// still there for the handler.
	req, _ = http.NewRequest("POST", srv.URL+"/proxy/x/actions/go", strings.NewReader(`{"n":1}`))
	if err := lmos.SignPeerRequest(req, priv, time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := <-got; d != did {
		t.Fatalf("server verified the POST as %q, want %q", d, did)
	}
}
