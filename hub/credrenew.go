package hub

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Keeping members' credentials valid (issue 24). Credentials are short
// lived (groups.credentialValidity, 7 days) so that revoked status list
// entries come back; a member connected for longer than that would hold
// an expired one. So the hub renews each stored credential once half its
// validity has passed: it signs it anew for the same membership, entry and
// list, stores it, and tells the doors as for a new membership, which
// push it to the member's inbox (MQTT) or socket (WebSocket).

// maxRenewalsPerPass bounds the credentials one pass signs (~60 µs each),
// in one write of the registry; the rest wait for the next pass.
const maxRenewalsPerPass = 1024

// renewalPeriod is how often the hub looks for credentials to renew: an
// eighth of the validity, at most an hour.
func renewalPeriod(validity time.Duration) time.Duration {
	return min(validity/8, time.Hour)
}

// renewLoop renews credentials every renewalPeriod until the registry
// closes.
func (r *Registry) renewLoop(ci *CredentialIssuer) {
	t := time.NewTicker(renewalPeriod(ci.Validity()))
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			if _, err := r.RenewCredentials(context.Background()); err != nil && ErrorCode(err) != EUNAVAILABLE {
				r.log.Warn("cannot renew membership credentials", "err", err)
			}
		}
	}
}

// renewDue is a membership whose stored credential is due for renewal.
type renewDue struct {
	group, thing string
	until        time.Time
}

// credentialUntil reads a credential's validUntil and status list URL.
func credentialUntil(cred json.RawMessage) (time.Time, string) {
	var c struct {
		ValidUntil       string `json:"validUntil"`
		CredentialStatus struct {
			StatusListCredential string `json:"statusListCredential"`
		} `json:"credentialStatus"`
	}
	if json.Unmarshal(cred, &c) != nil {
		return time.Time{}, ""
	}
	t, _ := time.Parse(time.RFC3339, c.ValidUntil)
	return t, c.CredentialStatus.StatusListCredential
}

// RenewCredentials renews the stored credentials past half their
// validity (or naming another list than the current one), at most
// maxRenewalsPerPass, the soonest to expire first, and returns how many.
// The hub runs it every renewalPeriod; tests call it with their clock.
func (r *Registry) RenewCredentials(ctx context.Context) (int, error) {
	ci := r.credentialIssuer()
	if ci == nil {
		return 0, nil
	}
	now, half := r.opts.Now(), ci.Validity()/2
	var due []renewDue
	r.mu.RLock()
	url := ci.ListURL(r.status.Generation)
	for gid, g := range r.groups {
		for _, m := range g.Members {
			if m.CredentialList != "" && (m.CredentialList != url || m.CredentialUntil.Sub(now) <= half) {
				due = append(due, renewDue{gid, m.Thing, m.CredentialUntil})
			}
		}
	}
	r.mu.RUnlock()
	if len(due) == 0 {
		return 0, nil
	}
	slices.SortFunc(due, func(a, b renewDue) int { return a.until.Compare(b.until) })
	if len(due) > maxRenewalsPerPass {
		due = due[:maxRenewalsPerPass]
	}
	gop := &groupOp{kind: groupRenew, renew: due}
	if err := r.submit(ctx, &op{kind: opGroup, group: gop}).err; err != nil {
		return 0, err
	}
	return gop.renewed, nil
}

// prepareRenew signs anew, in the batch's overlay, the credentials of the
// memberships gop names that are still there and still due.
func (r *Registry) prepareRenew(gop *groupOp, now time.Time) ([]Event, error) {
	ci := r.credentialIssuer()
	if ci == nil {
		return nil, nil
	}
	gen := r.batchGeneration()
	url, half := ci.ListURL(gen), ci.Validity()/2
	// The overlay changes only once every credential is signed.
	changed := map[string]*Group{}
	var changes []MembershipChange
	var renewed []MemberCredential
	for _, d := range gop.renew {
		old := r.currentGroup(d.group)
		if old == nil {
			continue
		}
		m, ok := old.Member(d.thing)
		if !ok || m.CredentialList == "" {
			continue
		}
		if m.CredentialList == url && m.CredentialUntil.Sub(now) > half {
			continue // renewed meanwhile
		}
		g := changed[d.group]
		if g == nil {
			g = old.clone()
		}
		i, _ := slices.BinarySearchFunc(g.Members, d.thing, func(m Member, t string) int { return strings.Compare(m.Thing, t) })
		m.gen = gen
		cred, err := ci.Issue(g, &m, now)
		if err != nil {
			return nil, &Error{Code: EINTERNAL, Message: "cannot renew a membership credential", Err: err}
		}
		r.setCredential(&g.Members[i], cred)
		renewed = append(renewed, MemberCredential{Group: d.group, Thing: d.thing, Credential: cred})
		changed[d.group] = g
		changes = append(changes, MembershipChange{Group: d.group, Thing: d.thing, Added: true})
	}
	for id, g := range changed {
		r.groupOverlay[id] = g
	}
	r.membershipChanges = append(r.membershipChanges, changes...)
	r.credChanges = append(r.credChanges, renewed...)
	gop.renewed = len(changes)
	return nil, nil
}

// batchGeneration is the status list generation as the batch so far left
// it, without making a copy of the list.
func (r *Registry) batchGeneration() int {
	if r.statusOverlay != nil {
		return r.statusOverlay.Generation
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.status.Generation
}
