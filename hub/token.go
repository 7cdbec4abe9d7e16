package hub

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tokenPrefix marks lmos-hub secrets so secret scanners and people can tell
// them apart from other bearer tokens.
const tokenPrefix = "lmos_"

// MinTokenLength is the shortest secret accepted as an admin token.
const MinTokenLength = 16

// Tokens manages admin bearer tokens. Only SHA-256 hashes are stored; the
// secrets have 256 bits of entropy, so a plain hash cannot be brute-forced.
type Tokens struct {
	store TokenStore
	now   func() time.Time
	// known caches the stored tokens found by hash (hash → Token): the
	// access policy checks a connection's token again on every decision,
	// and reading it from the store each time cost ~10 µs. Only tokens
	// that exist are cached (a guessed secret adds nothing), and every
	// change goes through this Tokens (put), so the cache is never stale
	// while the hub holds the store.
	known sync.Map
}

// NewTokens returns a token manager over s.
func NewTokens(s TokenStore, now func() time.Time) *Tokens {
	if now == nil {
		now = time.Now
	}
	return &Tokens{store: s, now: now}
}

// HashToken returns the stored form of a secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Create makes a new admin token without expiry and returns its secret,
// which is shown only once.
func (m *Tokens) Create(name string) (string, Token, error) {
	return m.CreateScoped(name, ScopeAdmin, time.Time{})
}

// CreateScoped makes a new token with scope that stops working at expires
// (zero: never) and returns its secret, which is shown only once.
func (m *Tokens) CreateScoped(name string, scope Scope, expires time.Time) (string, Token, error) {
	return m.CreateBound(name, scope, expires, "")
}

// CreateBound is CreateScoped for a token bound to a Thing (thing != ""):
// its holder speaks for that Thing on the group channels the Thing is a
// member of (PROTOCOL §7), and has only its scope's rights otherwise.
func (m *Tokens) CreateBound(name string, scope Scope, expires time.Time, thing string) (string, Token, error) {
	if !scope.Valid() {
		return "", Token{}, Errorf(EINVALID, "unknown token scope %q (use read, operate or admin)", scope)
	}
	if !expires.IsZero() && !expires.After(m.now()) {
		return "", Token{}, Errorf(EINVALID, "the token would expire at once (%s)", expires.UTC().Format(time.RFC3339))
	}
	if thing != "" {
		if err := ValidateID(thing); err != nil {
			return "", Token{}, &Error{Code: EINVALID, Message: "a token is bound to a Thing id",
				Fields: []FieldError{{Field: "/thing", Description: "not a Thing id"}}}
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", Token{}, fmt.Errorf("cannot create token: %w", err)
	}
	secret := tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	tok, err := m.install(secret, name, scope, expires, thing)
	return secret, tok, err
}

// Install stores secret (its hash) as a valid admin token, for provisioning
// with --admin-token. Installing a known secret returns its existing token;
// a revoked one is refused (EFORBIDDEN).
func (m *Tokens) Install(secret, name string) (Token, error) {
	return m.install(secret, name, ScopeAdmin, time.Time{}, "")
}

func (m *Tokens) install(secret, name string, scope Scope, expires time.Time, thing string) (Token, error) {
	if len(secret) < MinTokenLength || strings.ContainsAny(secret, " \t\r\n") {
		return Token{}, Errorf(EINVALID, "an admin token must be at least %d characters without spaces", MinTokenLength)
	}
	hash := HashToken(secret)
	if t, err := m.store.TokenByHash(hash); err == nil {
		if !t.Revoked.IsZero() {
			// A revoked token stays revoked, even if a configuration still
			// provisions it: reviving it on restart would undo the revocation.
			return t, Errorf(EFORBIDDEN, "admin token %s was revoked on %s; remove it from the configuration or create a new one",
				t.ID, t.Revoked.Format(time.RFC3339))
		}
		return t, nil
	} else if ErrorCode(err) != ENOTFOUND {
		return Token{}, err
	}
	var idb [6]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return Token{}, fmt.Errorf("cannot create token id: %w", err)
	}
	t := Token{ID: hex.EncodeToString(idb[:]), Name: name, Hash: hash, Created: m.now().UTC(), Scope: scope, Thing: thing}
	if scope == ScopeAdmin {
		t.Scope = "" // stored as before scopes existed: an admin token
	}
	if !expires.IsZero() {
		t.Expires = expires.UTC()
	}
	if err := m.put(t); err != nil {
		return Token{}, fmt.Errorf("cannot store token: %w", err)
	}
	return t, nil
}

// Verify returns the token for secret, or EUNAUTHORIZED when it is unknown,
// revoked or expired.
func (m *Tokens) Verify(secret string) (Token, error) {
	if secret == "" {
		return Token{}, Errorf(EUNAUTHORIZED, "a bearer token is required")
	}
	return m.verifyHash(HashToken(secret))
}

// Recheck verifies again a token accepted earlier (by its hash): a
// connection that authenticated with a token loses its rights the moment
// the token is revoked or expires.
func (m *Tokens) Recheck(t Token) (Token, error) { return m.verifyHash(t.Hash) }

func (m *Tokens) verifyHash(hash string) (Token, error) {
	var t Token
	var err error
	if c, ok := m.known.Load(hash); ok {
		t = c.(Token)
	} else if t, err = m.store.TokenByHash(hash); err == nil {
		m.known.Store(hash, t)
	}
	switch {
	case ErrorCode(err) == ENOTFOUND:
		return Token{}, Errorf(EUNAUTHORIZED, "the bearer token is not valid")
	case err != nil:
		return Token{}, &Error{Code: EINTERNAL, Message: "cannot check the token", Err: err}
	case !t.Revoked.IsZero():
		return Token{}, Errorf(EUNAUTHORIZED, "the bearer token was revoked")
	case t.Expired(m.now()):
		return Token{}, Errorf(EUNAUTHORIZED, "the bearer token expired on %s", t.Expires.Format(time.RFC3339))
	}
	return t, nil
}

// put stores t and updates the cache.
func (m *Tokens) put(t Token) error {
	if err := m.store.PutToken(t); err != nil {
		m.known.Delete(t.Hash)
		return err
	}
	m.known.Store(t.Hash, t)
	return nil
}

// List returns every token, revoked ones included.
func (m *Tokens) List() ([]Token, error) { return m.store.Tokens() }

// Revoke marks the token id revoked; it stops working at once.
func (m *Tokens) Revoke(id string) error {
	all, err := m.store.Tokens()
	if err != nil {
		return err
	}
	for _, t := range all {
		if t.ID == id {
			if t.Revoked.IsZero() {
				t.Revoked = m.now().UTC()
				return m.put(t)
			}
			return nil
		}
	}
	return Errorf(ENOTFOUND, "no token with id %q", id)
}

// ActiveCount returns how many admin tokens are neither revoked nor
// expired: the hub creates a first one when there is none.
func (m *Tokens) ActiveCount() (int, error) {
	all, err := m.store.Tokens()
	n := 0
	for _, t := range all {
		if t.Revoked.IsZero() && !t.Expired(m.now()) && t.EffectiveScope() == ScopeAdmin {
			n++
		}
	}
	return n, err
}

// Token is a bearer token as stored: never the secret, only its hash.
type Token struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Hash    string    `json:"hash"` // hex SHA-256 of the secret
	Created time.Time `json:"created"`
	// Revoked is zero while the token is valid.
	Revoked time.Time `json:"revoked,omitzero"`
	// Scope is what the token allows (access.go); empty is admin, as every
	// token stored before scopes existed was.
	Scope Scope `json:"scope,omitempty"`
	// Expires is zero for a token that does not expire.
	Expires time.Time `json:"expires,omitzero"`
	// Thing is the Thing a Thing-bound token speaks for on group channels
	// (hub.MemberOf); "" for other tokens.
	Thing string `json:"thing,omitempty"`
}

// EffectiveScope is the token's scope, admin for a token stored without one.
func (t Token) EffectiveScope() Scope {
	if t.Scope == "" {
		return ScopeAdmin
	}
	return t.Scope
}

// Expired reports whether the token has expired at now.
func (t Token) Expired(now time.Time) bool {
	return !t.Expires.IsZero() && !now.Before(t.Expires)
}

// TokenStore keeps admin tokens.
type TokenStore interface {
	// PutToken stores t (insert or replace by ID).
	PutToken(t Token) error
	// TokenByHash finds a token by the hash of its secret, or ENOTFOUND.
	TokenByHash(hash string) (Token, error)
	// Tokens lists every token (revoked ones included), oldest first.
	Tokens() ([]Token, error)
}

// ParseExpiry reads a token's expiry as the CLI and the API take it: a
// lifetime from now ("30d", "12h", "90m"; days are 24 h) or an RFC 3339
// time; "" is no expiry.
func ParseExpiry(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100*365 {
			return time.Time{}, Errorf(EINVALID, "invalid expiry %q: use a number of days such as 30d, a duration such as 12h, or an RFC 3339 time", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			return time.Time{}, Errorf(EINVALID, "invalid expiry %q: use a number of days such as 30d, a duration such as 12h, or an RFC 3339 time", s)
		}
	}
	return now.Add(d).UTC(), nil
}
