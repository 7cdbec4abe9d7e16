package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos/vc"
)

// Membership credentials (PROTOCOL §7): the hub sends the agent a W3C
// Verifiable Credential for each group its Thing is a member of, to its
// inbox (MQTT lmos/v1/things/{tid}/credentials/{gid}, WebSocket
// groupCredential); an empty one says the membership ended. The agent keeps
// the latest per group (Credentials), can present one to anyone, and
// verifies those others present (VerifyMembership).

// maxCredentials bounds the credentials an agent keeps (the hub lets a
// Thing be in 64 groups).
const maxCredentials = 256

// verifyClockSkew is how far a verifier's clock may lag the hub's (a
// device without a real-time clock): the hub's maximum for proofs.
const verifyClockSkew = 5 * time.Minute

// ErrHubUnknown: VerifyMembership does not know which hub to trust.
var ErrHubUnknown = errors.New("the hub's DID is not known: set Options.HubDID, or wait for a membership credential of the agent's own")

// credentialBox holds the agent's membership credentials and the hub's
// DID they taught it.
type credentialBox struct {
	mu     sync.Mutex
	byGrp  map[string]json.RawMessage
	hubDID string // Options.HubDID, or the issuer of the first credential received
	client *http.Client
}

// Credentials returns the membership credentials the agent holds, by
// group id: the latest the hub sent for each group its Thing is a member
// of. (JoinCredentials are the MQTT join's username and password.)
func (a *Agent) Credentials() map[string]json.RawMessage {
	a.vcs.mu.Lock()
	defer a.vcs.mu.Unlock()
	return maps.Clone(a.vcs.byGrp)
}

// HubDID is the DID of the hub the agent trusts as the issuer of
// membership credentials ("" while unknown).
func (a *Agent) HubDID() string {
	a.vcs.mu.Lock()
	defer a.vcs.mu.Unlock()
	if a.opts.HubDID != "" {
		return a.opts.HubDID
	}
	return a.vcs.hubDID
}

// received keeps a credential the hub sent to the agent's inbox for group
// gid (empty: the membership ended). It must be the Thing's own, for that
// group, by the hub the agent trusts: only the hub writes to the inbox,
// so the first one's issuer becomes the hub's DID unless Options.HubDID
// says it.
func (a *Agent) received(gid string, cred []byte) {
	a.vcs.mu.Lock()
	defer a.vcs.mu.Unlock()
	if len(bytes.TrimSpace(cred)) == 0 {
		delete(a.vcs.byGrp, gid)
		return
	}
	m, err := vc.ParseMembership(cred)
	switch {
	case err != nil:
		a.log.Warn("ignoring a membership credential", "group", gid, "err", err)
		return
	case m.Group.ID != gid || m.Thing != a.td.id:
		a.log.Warn("ignoring a membership credential of another Thing or group", "group", gid, "credential_group", m.Group.ID, "thing", m.Thing)
		return
	}
	want := a.opts.HubDID
	if want == "" {
		want = a.vcs.hubDID
	}
	if want != "" && m.Issuer != want {
		a.log.Warn("ignoring a membership credential of another issuer", "group", gid, "issuer", m.Issuer, "hub", want)
		return
	}
	if a.vcs.byGrp == nil {
		a.vcs.byGrp = map[string]json.RawMessage{}
	}
	if _, ok := a.vcs.byGrp[gid]; !ok && len(a.vcs.byGrp) >= maxCredentials {
		a.log.Warn("ignoring a membership credential: too many held", "group", gid)
		return
	}
	a.vcs.hubDID = m.Issuer
	a.vcs.byGrp[gid] = bytes.Clone(cred)
	a.log.Info("membership credential received", "group", gid, "valid_until", m.ValidUntil)
}

// VerifyMembership checks a membership credential someone presents: the
// hub's proof by the DID the agent trusts (Options.HubDID, else the
// issuer of its own credentials: ErrHubUnknown before it has one), the
// validity dates, and the credential's entry in the hub's status list,
// fetched from the credential's statusListCredential URL over HTTP(S)
// with the agent's TLS settings and verified the same way (proof, issuer,
// size, and its own validity: a list past its validUntil, or without one,
// is refused, so an old copy replayed by someone on the path cannot hide
// a revocation for longer than the hub's status list validity). A revoked
// credential fails with an error wrapping vc.ErrRevoked. Everything else
// is checked offline. It is VerifyMembershipAt at time.Now().
func (a *Agent) VerifyMembership(ctx context.Context, cred []byte) (vc.Membership, error) {
	return a.VerifyMembershipAt(ctx, cred, time.Now())
}

// VerifyMembershipAt is VerifyMembership with the verifier's clock at now:
// the credential and the status list must both be valid at now.
func (a *Agent) VerifyMembershipAt(ctx context.Context, cred []byte, now time.Time) (vc.Membership, error) {
	did := a.HubDID()
	if did == "" {
		return vc.Membership{}, ErrHubUnknown
	}
	// The credential's own proof first: the status list URL is fetched
	// only once the hub is known to have signed it, never where a forged
	// credential points.
	opts := []vc.Option{vc.ExpectIssuer(did), vc.AllowClockSkew(verifyClockSkew)}
	m, err := vc.CheckMembership(cred, now, opts...)
	if err != nil {
		return m, err
	}
	list, err := a.fetchStatusList(ctx, m.StatusListURL)
	if err != nil {
		return m, err
	}
	return m, vc.CheckStatus(m, list, now, opts...)
}

// fetchStatusList reads the status list credential at u, within
// vc.MaxStatusListCredentialBytes.
func (a *Agent) fetchStatusList(ctx context.Context, u string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.opts.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") {
		return nil, fmt.Errorf("%w: the status list URL %q is not http(s)", vc.ErrStatusList, u)
	}
	req.Header.Set("Accept", vc.MediaType+", application/json")
	c, err := a.statusClient()
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot fetch %s: %w", vc.ErrStatusList, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %s", vc.ErrStatusList, u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, vc.MaxStatusListCredentialBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", vc.ErrStatusList, u, err)
	}
	if len(b) > vc.MaxStatusListCredentialBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", vc.ErrStatusList, u, vc.MaxStatusListCredentialBytes)
	}
	return b, nil
}

// statusClient is the HTTP client of status list fetches: the agent's TLS
// trust (a pinned hub certificate), no redirects to elsewhere.
func (a *Agent) statusClient() (*http.Client, error) {
	a.vcs.mu.Lock()
	defer a.vcs.mu.Unlock()
	if a.vcs.client != nil {
		return a.vcs.client, nil
	}
	tc, err := clientTLS(a.opts, a.log)
	if err != nil {
		return nil, err
	}
	a.vcs.client = &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment, MaxIdleConns: 2},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return a.vcs.client, nil
}
