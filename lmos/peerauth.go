package lmos

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Hub-to-hub authentication (PROTOCOL §9 "Federation"). A request from a
// paired hub carries
//
//	Authorization: LMOS-Peer keyId="did:key:…",created=<unix seconds>,digest="<base64url>",signature="<base64url>"
//
// where digest is the SHA-256 of the body (of no body when absent) and the
// signature is Ed25519, by the hub's own key, over
// "lmos-peer\n" + METHOD + "\n" + host + "\n" + path?query + "\n" + created +
// "\n" + digest. It covers the method, the host, the request target and
// the body, so a signed request cannot be replayed against another
// resource or hub, nor with another body; created bounds its replay in
// time (PeerSkew either way). The digest travels in the header so that
// the signature is checked before any body is read: only a paired hub's
// body is read, to compare it with the digest.

// PeerScheme is the Authorization scheme of hub-to-hub requests.
const PeerScheme = "LMOS-Peer"

// PeerSkew is how far created may lie from the receiver's clock.
const PeerSkew = 300 * time.Second

// maxPeerHeader bounds the header before it is parsed: a did:key is under
// 60 characters, a signature 86.
const maxPeerHeader = 512

// The kinds of refusal of a peer header; every error of VerifyPeer wraps
// one of them.
var (
	ErrPeerMalformed = errors.New("malformed LMOS-Peer authorization")
	ErrPeerStale     = errors.New("LMOS-Peer authorization outside the allowed clock skew")
	ErrPeerSignature = errors.New("LMOS-Peer signature does not verify")
)

// PeerAuth is a parsed LMOS-Peer authorization.
type PeerAuth struct {
	KeyID     string // the signing hub's did:key
	Created   int64  // unix seconds
	Digest    string // base64url SHA-256 of the body; PeerDigest(nil) when absent
	Signature []byte
}

// PeerDigest is the digest parameter for body.
func PeerDigest(body []byte) string {
	d := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(d[:])
}

// PeerSigningInput is the byte string a peer signs; digest is the body's
// (PeerDigest).
func PeerSigningInput(method, host, target string, created int64, digest string) []byte {
	return []byte("lmos-peer\n" + method + "\n" + host + "\n" + target + "\n" + strconv.FormatInt(created, 10) + "\n" + digest)
}

// IsPeerAuthorization reports whether an Authorization header value uses
// the LMOS-Peer scheme.
func IsPeerAuthorization(h string) bool {
	return len(h) > len(PeerScheme) && strings.EqualFold(h[:len(PeerScheme)], PeerScheme) && h[len(PeerScheme)] == ' '
}

// SignPeer returns the Authorization header value for a request with
// method to host and target (path and query, as sent) and body at now.
func SignPeer(priv ed25519.PrivateKey, method, host, target string, body []byte, now time.Time) string {
	created, digest := now.Unix(), PeerDigest(body)
	sig := ed25519.Sign(priv, PeerSigningInput(method, host, target, created, digest))
	did := proof.DID(priv.Public().(ed25519.PublicKey))
	return fmt.Sprintf(`%s keyId=%q,created=%d,digest=%q,signature=%q`, PeerScheme, did, created, digest, base64.RawURLEncoding.EncodeToString(sig))
}

// SignPeerRequest sets r's Authorization to an LMOS-Peer signature by
// priv, over the host, target and body r will be sent with. A body is read
// through r.GetBody (http.NewRequest sets it for in-memory bodies); one
// without is read and put back.
func SignPeerRequest(r *http.Request, priv ed25519.PrivateKey, now time.Time) error {
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		rc := r.Body
		if r.GetBody != nil {
			var err error
			if rc, err = r.GetBody(); err != nil {
				return fmt.Errorf("cannot read the request's body to sign it: %w", err)
			}
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("cannot read the request's body to sign it: %w", err)
		}
		body = b
		if r.GetBody == nil {
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
	}
	r.Header.Set("Authorization", SignPeer(priv, r.Method, host, r.URL.RequestURI(), body, now))
	return nil
}

// ParsePeerAuth reads an LMOS-Peer Authorization header value. Each of
// keyId, created and signature must appear exactly once; nothing else may.
func ParsePeerAuth(h string) (PeerAuth, error) {
	var a PeerAuth
	if len(h) > maxPeerHeader {
		return a, fmt.Errorf("%w: the header is %d bytes long, more than %d", ErrPeerMalformed, len(h), maxPeerHeader)
	}
	if !IsPeerAuthorization(h) {
		return a, fmt.Errorf("%w: the scheme is not %s", ErrPeerMalformed, PeerScheme)
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(strings.TrimSpace(h[len(PeerScheme)+1:]), ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || seen[name] {
			return a, fmt.Errorf("%w: expected keyId=\"…\",created=…,signature=\"…\" each once, got %q", ErrPeerMalformed, Truncate(part, 64))
		}
		seen[name] = true
		if err := a.set(name, value); err != nil {
			return a, err
		}
	}
	if !seen["keyId"] || !seen["created"] || !seen["signature"] {
		return a, fmt.Errorf("%w: keyId, created and signature are all required", ErrPeerMalformed)
	}
	if !seen["digest"] {
		a.Digest = PeerDigest(nil)
	}
	return a, nil
}

func (a *PeerAuth) set(name, value string) error {
	unquote := func() (string, error) {
		if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
			return "", fmt.Errorf("%w: %s must be a quoted string", ErrPeerMalformed, name)
		}
		return value[1 : len(value)-1], nil
	}
	var err error
	switch name {
	case "keyId":
		a.KeyID, err = unquote()
	case "created":
		a.Created, err = strconv.ParseInt(value, 10, 64)
		if err != nil || a.Created < 0 {
			err = fmt.Errorf("%w: created must be unix seconds, got %q", ErrPeerMalformed, Truncate(value, 32))
		}
	case "digest":
		if a.Digest, err = unquote(); err == nil && len(a.Digest) != 43 {
			err = fmt.Errorf("%w: digest must be a SHA-256 in unpadded base64url", ErrPeerMalformed)
		}
	case "signature":
		var s string
		if s, err = unquote(); err == nil {
			a.Signature, err = base64.RawURLEncoding.DecodeString(s)
			if err != nil || len(a.Signature) != ed25519.SignatureSize {
				err = fmt.Errorf("%w: the signature must be %d bytes in unpadded base64url", ErrPeerMalformed, ed25519.SignatureSize)
			}
		}
	default:
		err = fmt.Errorf("%w: unknown parameter %q", ErrPeerMalformed, Truncate(name, 32))
	}
	return err
}

// VerifyPeer checks an LMOS-Peer header value for a request with method,
// host, target and body received at now, and returns the signing hub's
// DID. Whether that hub is paired is the caller's decision.
func VerifyPeer(h, method, host, target string, body []byte, now time.Time) (string, error) {
	a, err := verifyPeerHeader(h, method, host, target, now)
	if err != nil {
		return "", err
	}
	if PeerDigest(body) != a.Digest {
		return "", fmt.Errorf("%w: the body is not the one %s signed", ErrPeerSignature, a.KeyID)
	}
	return a.KeyID, nil
}

// verifyPeerHeader checks the header's form, time and signature (over the
// digest it names), not the body.
func verifyPeerHeader(h, method, host, target string, now time.Time) (PeerAuth, error) {
	a, err := ParsePeerAuth(h)
	if err != nil {
		return a, err
	}
	did, pub, err := proof.ParseDID(a.KeyID)
	if err != nil || did != a.KeyID {
		return a, fmt.Errorf("%w: keyId %q is not an Ed25519 did:key", ErrPeerMalformed, Truncate(a.KeyID, 80))
	}
	if d := now.Sub(time.Unix(a.Created, 0)); d > PeerSkew || d < -PeerSkew {
		return a, fmt.Errorf("%w: created is %s away from this hub's clock, more than %s", ErrPeerStale, d.Round(time.Second), PeerSkew)
	}
	if !proof.CheckSignature(pub, PeerSigningInput(method, host, target, a.Created, a.Digest), a.Signature) {
		return a, fmt.Errorf("%w: not a signature by %s of %s %s%s", ErrPeerSignature, did, method, host, Truncate(target, 128))
	}
	return a, nil
}

// VerifyPeerRequest checks the LMOS-Peer header of a request a server
// received and returns the signer's DID and whether paired says it is a
// paired hub. Only then is the body read, at most maxBody bytes (more is
// refused, as malformed), compared with the signed digest and put back for
// the handler: a stranger's body is never read.
func VerifyPeerRequest(r *http.Request, now time.Time, maxBody int64, paired func(did string) bool) (string, bool, error) {
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	a, err := verifyPeerHeader(r.Header.Get("Authorization"), r.Method, r.Host, target, now)
	if err != nil || !paired(a.KeyID) {
		return a.KeyID, false, err
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		r.Body.Close()
		if err != nil {
			return "", false, fmt.Errorf("%w: cannot read the body: %v", ErrPeerMalformed, err)
		}
		if int64(len(b)) > maxBody {
			return "", false, fmt.Errorf("%w: the body is more than %d bytes", ErrPeerMalformed, maxBody)
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	if PeerDigest(body) != a.Digest {
		return "", false, fmt.Errorf("%w: the body is not the one %s signed", ErrPeerSignature, a.KeyID)
	}
	return a.KeyID, true, nil
}
