package hub

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
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
	// retired are the signed lists of earlier generations (every entry
	// revoked), by generation; a few at most.
	retired map[int]retiredList
}

// retiredList is a signed list of an earlier generation.
type retiredList struct {
	url string
	vc  []byte
	at  time.Time
}

// maxRetiredLists is how many earlier generations the hub serves (each
// signed at most twice per status list validity, whoever asks): a
// credential naming an older one fails to verify all the same, its list
// being gone.
const maxRetiredLists = 8

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

// StatusListURL is the URL the status list of generation 0 is published
// at (the configured or listener URL).
func (c *CredentialIssuer) StatusListURL() string {
	if p := c.url.Load(); p != nil {
		return *p
	}
	return ""
}

// ListURL is the URL of the status list of generation gen: StatusListURL
// for 0, else that URL's path + "/<gen>" (a rotation, hub/statusrotate.go,
// starts a new list at a new URL).
func (c *CredentialIssuer) ListURL(gen int) string {
	base := c.StatusListURL()
	if gen <= 0 || base == "" {
		return base
	}
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strconv.Itoa(gen)
	u.RawPath = ""
	return u.String()
}

// DID is the issuer's did:key.
func (c *CredentialIssuer) DID() string { return c.did }

// Validity is how long a credential is valid.
func (c *CredentialIssuer) Validity() time.Duration { return c.validity }

// Issue signs m's membership of g, valid from now for the issuer's
// validity. The subject is the member's DID when it was verified, else
// its Thing id.
func (c *CredentialIssuer) Issue(g *Group, m *Member, now time.Time) (json.RawMessage, error) {
	url := c.ListURL(m.gen)
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
	url := c.ListURL(s.Generation)
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

// RetiredListCredential returns the status list of the earlier
// generation gen, every entry revoked: every credential naming it was
// issued before the rotation that retired it. Signed again, as the
// current one, once half its validity has passed.
func (c *CredentialIssuer) RetiredListCredential(gen int, now time.Time) ([]byte, error) {
	url := c.ListURL(gen)
	validity := c.StatusListValidity()
	now = now.UTC().Truncate(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.retired[gen]; ok && r.url == url && !now.Before(r.at) && now.Before(r.at.Add(validity/2)) {
		return r.vc, nil
	}
	all := bytes.Repeat([]byte{0xff}, vc.StatusListBytes)
	b, err := vc.IssueStatusList(url, all, now, now.Add(validity), StatusListTTL, c.key)
	if err != nil {
		return nil, err
	}
	if c.retired == nil {
		c.retired = make(map[int]retiredList)
	}
	delete(c.retired, gen) // signed anew: its place is taken again
	for len(c.retired) >= maxRetiredLists {
		// The oldest kept one, which gen may be older than (a request
		// that read the generation before more rotations came).
		oldest, first := 0, true
		for g := range c.retired {
			if first || g < oldest {
				oldest, first = g, false
			}
		}
		delete(c.retired, oldest)
	}
	c.retired[gen] = retiredList{url: url, vc: b, at: now}
	c.signed++
	return b, nil
}

// StatusListsSigned is how many times a status list (the current one or
// a retired one) was signed.
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
	// The generation of the list m's index is of, read with m: a renewal
	// must never put an index on another generation's list.
	m.gen = r.status.Generation
	r.mu.RUnlock()
	if !found {
		return nil, Errorf(ENOTFOUND, "no group %q", gid)
	}
	if !ok {
		return nil, Errorf(ENOTFOUND, "%q is not a member of the group %q", thing, gid)
	}
	if r.opts.Issuer == nil {
		return nil, Errorf(ENOTFOUND, "the hub issued no credential for %q in %q", thing, gid)
	}
	now := r.opts.Now()
	ci := r.credentialIssuer()
	url := ""
	if ci != nil {
		url = ci.ListURL(m.gen)
	}
	// Another issuer (a test's) cannot say where its list is: kept as is.
	fresh := ci == nil || m.CredentialList == url && now.Before(m.CredentialUntil)
	var stored json.RawMessage
	if fresh || m.CredentialList == "" {
		// Committed before the membership was visible: absent only when
		// the hub issued none, or the membership ended meanwhile.
		var err error
		if stored, err = r.store.MemberCredential(gid, thing); err != nil {
			return nil, &Error{Code: EINTERNAL, Message: "cannot read the membership credential", Err: err}
		}
		if stored == nil {
			return nil, Errorf(ENOTFOUND, "the hub issued no credential for %q in %q", thing, gid)
		}
	}
	if fresh {
		return stored, nil
	}
	key := renewalKey{group: gid, title: g.Title, thing: thing, did: m.DID, index: m.StatusIndex, url: url}
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

// StatusListCredentialOf returns the signed status list of generation
// gen: the current one, or an earlier one with every entry revoked
// (ENOTFOUND for a generation that never was).
func (r *Registry) StatusListCredentialOf(gen int) ([]byte, error) {
	ci := r.credentialIssuer()
	if ci == nil {
		return nil, Errorf(EUNAVAILABLE, "the hub issues no membership credentials")
	}
	r.mu.RLock()
	cur := r.status.Generation
	r.mu.RUnlock()
	switch {
	case gen == cur:
		return r.StatusListCredential()
	case gen < 0 || gen > cur:
		return nil, Errorf(ENOTFOUND, "no status list of generation %d", gen)
	case gen < cur-maxRetiredLists:
		return nil, Errorf(ENOTFOUND, "the status list of generation %d was retired %d rotations ago: every credential naming it is revoked", gen, cur-gen)
	}
	b, err := ci.RetiredListCredential(gen, r.opts.Now())
	if err != nil {
		return nil, &Error{Code: EINTERNAL, Message: "cannot sign the status list", Err: err}
	}
	return b, nil
}

// StatusListGeneration is the current status list's generation (0 until
// an admin rotates it).
func (r *Registry) StatusListGeneration() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.status.Generation
}

// StatusListURL is the URL of the current status list ("" when the hub
// issues no credentials).
func (r *Registry) StatusListURL() string {
	ci := r.credentialIssuer()
	if ci == nil {
		return ""
	}
	r.mu.RLock()
	gen := r.status.Generation
	r.mu.RUnlock()
	return ci.ListURL(gen)
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
