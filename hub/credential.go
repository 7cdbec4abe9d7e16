package hub

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// Membership credentials (PROTOCOL §7): the hub signs one W3C Verifiable
// Credential per membership with its did:key (lmos/vc) and publishes the
// revocation status of every one in a signed Bitstring Status List.

// DefaultCredentialValidity is how long a membership credential is valid
// (groups.credentialValidity). It is short because a revoked entry of the
// status list is reused only once every credential it served has expired
// (hub/group.go); members get a renewed one whenever they read it.
const DefaultCredentialValidity = 7 * 24 * time.Hour

// DefaultStatusListValidity is how long a signed status list is valid
// (groups.statusListValidity): a copy fetched before a revocation verifies
// for at most this long, wherever it is replayed (PROTOCOL §7.1).
const DefaultStatusListValidity = 10 * time.Minute

// StatusListTTL is the list's ttl (Bitstring Status List v1.0) and its
// HTTP Cache-Control max-age: how long a verifier may cache it.
const StatusListTTL = 30 * time.Second

// CredentialIssuer is the hub's MembershipIssuer: it signs membership
// credentials and the status list credential with the hub's key.
type CredentialIssuer struct {
	key      ed25519.PrivateKey
	did      string
	validity time.Duration
	// listValidity is how long a signed status list is valid.
	listValidity atomic.Int64
	url          atomic.Pointer[string]

	// The signed status list and the bits it was signed for: re-signed
	// only when a bit changed (Ed25519 and gzip of 16 KiB cost ~0.2 ms).
	mu       sync.Mutex
	listBits []byte
	listURL  string
	listVC   []byte
	listAt   time.Time // when listVC was signed
	signed   int       // status lists signed (tests and metrics)
}

// NewCredentialIssuer returns the issuer of key's credentials, valid for
// validity (0: DefaultCredentialValidity). The status list URL must be
// set (SetStatusListURL) before the first credential is issued.
func NewCredentialIssuer(key ed25519.PrivateKey, validity time.Duration) *CredentialIssuer {
	if validity <= 0 {
		validity = DefaultCredentialValidity
	}
	c := &CredentialIssuer{key: key, did: proof.DID(key.Public().(ed25519.PublicKey)), validity: validity}
	c.listValidity.Store(int64(DefaultStatusListValidity))
	return c
}

// SetStatusListValidity sets how long a signed status list is valid
// (groups.statusListValidity; 0: DefaultStatusListValidity).
func (c *CredentialIssuer) SetStatusListValidity(d time.Duration) {
	if d <= 0 {
		d = DefaultStatusListValidity
	}
	c.listValidity.Store(int64(d))
}

// StatusListValidity is how long a signed status list is valid.
func (c *CredentialIssuer) StatusListValidity() time.Duration {
	return time.Duration(c.listValidity.Load())
}

// SetStatusListURL sets the absolute URL the status list is published at,
// which every credential names. It is known once the HTTP listener is
// bound (or configured: groups.statusListURL).
func (c *CredentialIssuer) SetStatusListURL(u string) { c.url.Store(&u) }

// StatusListURL is the URL the status list is published at.
func (c *CredentialIssuer) StatusListURL() string {
	if p := c.url.Load(); p != nil {
		return *p
	}
	return ""
}

// DID is the issuer's did:key.
func (c *CredentialIssuer) DID() string { return c.did }

// Validity is how long a credential is valid.
func (c *CredentialIssuer) Validity() time.Duration { return c.validity }

// Issue signs m's membership of g, valid from now for the issuer's
// validity. The subject is the member's DID when it was verified, else
// its Thing id.
func (c *CredentialIssuer) Issue(g *Group, m *Member, now time.Time) (json.RawMessage, error) {
	url := c.StatusListURL()
	if url == "" {
		return nil, errors.New("the status list URL is not set")
	}
	subject := m.DID
	if subject == "" {
		subject = m.Thing
	}
	now = now.UTC().Truncate(time.Second)
	return vc.IssueMembership(vc.Membership{
		Subject: subject, Thing: m.Thing, Group: vc.Group{ID: g.ID, Title: g.Title},
		ValidFrom: now, ValidUntil: now.Add(c.validity), StatusIndex: m.StatusIndex, StatusListURL: url,
	}, c.key)
}

// StatusListCredential returns s signed as the status list credential,
// valid from now for the status list validity: the one signed before while
// the bits are the same and it has more than half its validity left, else
// a new one. Readers therefore always get a list valid for at least half
// the validity, and the hub signs at most twice per validity when nothing
// changes.
func (c *CredentialIssuer) StatusListCredential(s StatusList, now time.Time) ([]byte, error) {
	url := c.StatusListURL()
	validity := c.StatusListValidity()
	now = now.UTC().Truncate(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listVC != nil && c.listURL == url && bytes.Equal(c.listBits, s.Bits) &&
		!now.Before(c.listAt) && now.Before(c.listAt.Add(validity/2)) {
		return c.listVC, nil
	}
	b, err := vc.IssueStatusList(url, s.Bits, now, now.Add(validity), StatusListTTL, c.key)
	if err != nil {
		return nil, err
	}
	c.listBits, c.listURL, c.listVC, c.listAt = bytes.Clone(s.Bits), url, b, now
	c.signed++
	return b, nil
}

// StatusListsSigned is how many times the status list was signed.
func (c *CredentialIssuer) StatusListsSigned() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signed
}

// credentialIssuer is the hub's issuer, if RegistryOptions.Issuer is one.
func (r *Registry) credentialIssuer() *CredentialIssuer {
	ci, _ := r.opts.Issuer.(*CredentialIssuer)
	return ci
}

// CredentialIssuer is the registry's issuer of membership credentials
// (nil when it issues none).
func (r *Registry) CredentialIssuer() *CredentialIssuer { return r.credentialIssuer() }

// MemberCredential returns thing's membership credential of group gid
// (ENOTFOUND when it is not a member or the hub issues none). A stored
// credential that expired, or names another status list URL than the
// hub's now, is renewed: signed anew for the same membership and status
// entry, valid from now, and answered without being stored (renewal is a
// read). The renewal is kept in memory while it is valid, so reads (an
// MQTT member subscribing again and again, 64 groups at a time) sign once
// per membership, not once per read.
func (r *Registry) MemberCredential(gid, thing string) (json.RawMessage, error) {
	r.mu.RLock()
	var g Group // the group without its members: only m is needed
	var m Member
	found, ok := false, false
	if x := r.groups[gid]; x != nil {
		found = true
		g = *x
		g.Members = nil
		m, ok = x.Member(thing)
	}
	r.mu.RUnlock()
	if !found {
		return nil, Errorf(ENOTFOUND, "no group %q", gid)
	}
	if !ok {
		return nil, Errorf(ENOTFOUND, "%q is not a member of the group %q", thing, gid)
	}
	if m.Credential == nil || r.opts.Issuer == nil {
		return nil, Errorf(ENOTFOUND, "the hub issued no credential for %q in %q", thing, gid)
	}
	now := r.opts.Now()
	// Another issuer (a test's) cannot say where its list is: kept as is.
	ci := r.credentialIssuer()
	if ci == nil || !stale(m.Credential, ci.StatusListURL(), now) {
		return m.Credential, nil
	}
	key := renewalKey{group: gid, title: g.Title, thing: thing, did: m.DID, index: m.StatusIndex, url: ci.StatusListURL()}
	if cred := r.renewals.get(key, now); cred != nil {
		return cred, nil
	}
	cred, err := r.opts.Issuer.Issue(&g, &m, now)
	if err != nil {
		return nil, &Error{Code: EINTERNAL, Message: "cannot renew the membership credential", Err: err}
	}
	r.renewals.put(key, cred, now)
	return cred, nil
}

// maxRenewals bounds the renewed credentials kept in memory (~1.2 KB
// each).
const maxRenewals = 4096

// renewalKey names what a renewed credential says: a membership (its
// status entry, which a new membership never shares), the subject and
// group title it was signed with, and the status list URL.
type renewalKey struct {
	group, title, thing, did string
	index                    int
	url                      string
}

// renewalCache keeps renewed credentials while they are valid. A removed
// membership never reaches it (MemberCredential answers ENOTFOUND first);
// its entry is dropped when the cache fills.
type renewalCache struct {
	mu sync.Mutex
	m  map[renewalKey]json.RawMessage
}

func (c *renewalCache) get(k renewalKey, now time.Time) json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	cred := c.m[k]
	if cred != nil && stale(cred, k.url, now) {
		delete(c.m, k)
		return nil
	}
	return cred
}

func (c *renewalCache) put(k renewalKey, cred json.RawMessage, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[renewalKey]json.RawMessage)
	}
	if len(c.m) >= maxRenewals {
		for k, v := range c.m {
			if stale(v, k.url, now) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxRenewals {
			clear(c.m) // all valid: renewals of memberships since removed, or a flood
		}
	}
	c.m[k] = cred
}

// stale reports a credential past its validUntil or naming another status
// list than url.
func stale(cred json.RawMessage, url string, now time.Time) bool {
	var c struct {
		ValidUntil       string `json:"validUntil"`
		CredentialStatus struct {
			StatusListCredential string `json:"statusListCredential"`
		} `json:"credentialStatus"`
	}
	if json.Unmarshal(cred, &c) != nil {
		return true
	}
	until, err := time.Parse(time.RFC3339, c.ValidUntil)
	return err != nil || !now.Before(until) || c.CredentialStatus.StatusListCredential != url
}

// StatusListCredential returns the signed status list credential of every
// membership credential the hub issued (EUNAVAILABLE when it issues none).
func (r *Registry) StatusListCredential() ([]byte, error) {
	ci := r.credentialIssuer()
	if ci == nil {
		return nil, Errorf(EUNAVAILABLE, "the hub issues no membership credentials")
	}
	b, err := ci.StatusListCredential(r.StatusList(), r.opts.Now())
	if err != nil {
		return nil, &Error{Code: EINTERNAL, Message: "cannot sign the status list", Err: err}
	}
	return b, nil
}
