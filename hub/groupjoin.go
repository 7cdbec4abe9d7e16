package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
)

// Self-join and the conditional and in-loop writes of the groups API.
//
// Self-join (PROTOCOL §7): in a group with selfJoin, a Thing adds or
// removes itself without a token by a statement signed (eddsa-jcs-2022) by
// the key its id is bound to:
//
//	{"group": gid, "thing": tid, "action": "join"|"leave", "proof": {…}}
//
// A statement is accepted once: its created must lie within
// security.maxClockSkew of the hub's clock, after the hub started, and
// after the last statement accepted for the same Thing and group, which
// the hub keeps in memory for the skew window.

// Actions of a membership statement.
const (
	StatementJoin  = "join"
	StatementLeave = "leave"
)

// MaxStatementBytes bounds a membership statement: three short members
// and a proof.
const MaxStatementBytes = 16 << 10

// maxStatementLog bounds the accepted statements remembered at once; all
// of them lie within the skew window, so more means a flood.
const maxStatementLog = 65536

// MaxSelfJoinsPerHour bounds the joins one Thing makes by itself to one
// group within an hour. Every join takes a new entry of the hub's status
// list, which is never reused (a revocation is final, W3C Bitstring Status
// List), so a join/leave loop would use all 131,072 up and no Thing could
// join any group again.
const MaxSelfJoinsPerHour = 8

// statementLog is the replay memory of self-join statements.
type statementLog struct {
	mu sync.Mutex
	// last is the created of the last accepted statement per
	// group + "\x00" + thing.
	last map[string]time.Time
	// joins are the times of the accepted joins of the last hour per
	// group + "\x00" + thing (at most MaxSelfJoinsPerHour each).
	joins map[string][]time.Time
	// since is the registry's start: a statement created before it may
	// have been accepted by the process before, whose memory is gone.
	since time.Time
}

// accept records created for key unless it replays what was accepted;
// horizon is the oldest created still fresh. A join (at now) is also
// counted against MaxSelfJoinsPerHour.
func (l *statementLog) accept(key string, created, horizon time.Time, join bool, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.last[key]; ok && !created.After(last) {
		return Errorf(ECONFLICT, "replayed statement: created %s is not after the last accepted statement of this Thing for this group (%s)",
			created.UTC().Format(time.RFC3339Nano), last.UTC().Format(time.RFC3339Nano))
	}
	if l.last == nil {
		l.last = make(map[string]time.Time)
	}
	if len(l.last) >= maxStatementLog/2 {
		// Stale entries need no memory: their statements are refused as
		// stale anyway.
		for k, t := range l.last {
			if t.Before(horizon) {
				delete(l.last, k)
			}
		}
	}
	if len(l.last) >= maxStatementLog {
		return &Error{Code: ERATELIMIT, Limit: "groups.maxSelfJoinStatements",
			Message: fmt.Sprintf("the hub accepted %d self-join statements within security.maxClockSkew; retry later", maxStatementLog)}
	}
	if join {
		if err := l.countJoin(key, now); err != nil {
			return err
		}
	}
	l.last[key] = created
	return nil
}

// countJoin records a join of key at now unless MaxSelfJoinsPerHour were
// made within the hour before; l.mu is held.
func (l *statementLog) countJoin(key string, now time.Time) error {
	if l.joins == nil {
		l.joins = make(map[string][]time.Time)
	}
	recent := func(ts []time.Time) []time.Time {
		i := 0
		for i < len(ts) && !ts[i].After(now.Add(-time.Hour)) {
			i++
		}
		return ts[i:]
	}
	if len(l.joins) >= maxStatementLog/2 {
		for k, ts := range l.joins {
			if len(recent(ts)) == 0 {
				delete(l.joins, k)
			}
		}
	}
	ts := recent(l.joins[key])
	if len(ts) >= MaxSelfJoinsPerHour {
		return &Error{Code: ERATELIMIT, Limit: "groups.selfJoinsPerHour",
			Message: fmt.Sprintf("this Thing joined this group by itself %d times within the hour, the limit (each join takes a status list entry for good); retry after %s",
				MaxSelfJoinsPerHour, ts[0].Add(time.Hour).UTC().Format(time.RFC3339))}
	}
	if len(l.joins) >= maxStatementLog {
		return &Error{Code: ERATELIMIT, Limit: "groups.maxSelfJoinStatements",
			Message: fmt.Sprintf("%d Things and groups joined by themselves within the hour; retry later", maxStatementLog)}
	}
	l.joins[key] = append(slices.Clip(ts), now)
	return nil
}

// membershipStatement is the signed body of a self-join request.
type membershipStatement struct {
	Group  string          `json:"group"`
	Thing  string          `json:"thing"`
	Action string          `json:"action"`
	Proof  json.RawMessage `json:"proof"`
}

// SelfMembership adds (join) or removes thing to or from group gid on the
// Thing's own statement (the request body), whose proof is charged to the
// client address from (security.verifyRate). Refusals: EUNAUTHORIZED
// without a proof, EINVALID for a malformed statement or proof or one
// that does not say this request, ENOTFOUND for an unknown group,
// EFORBIDDEN when the group does not allow self-join, the id is not bound
// or another key signed, ECONFLICT for a replayed or stale statement.
func (r *Registry) SelfMembership(ctx context.Context, gid, thing string, join bool, statement []byte, from string) (Group, error) {
	if err := ValidateGroupID(gid); err != nil {
		return Group{}, err
	}
	if err := ValidateID(thing); err != nil {
		return Group{}, err
	}
	st, err := readStatement(statement)
	if err != nil {
		return Group{}, err
	}
	g, err := r.Group(gid)
	if err != nil {
		return Group{}, err
	}
	if !g.SelfJoin {
		return Group{}, Errorf(EFORBIDDEN, "the group %q does not let Things join or leave by themselves: an operator manages its members", gid)
	}
	if from != "" && r.verifyLimit != nil {
		if ok, wait := r.verifyLimit.Allow(SourceOf(from)); !ok {
			return Group{}, &Error{Code: ERATELIMIT, Limit: "security.verifyRate",
				Message: fmt.Sprintf("too many signed documents from this address; retry in %s", wait.Round(time.Millisecond))}
		}
	}
	res, err := proof.VerifyWith(statement, r.sigs.check)
	if err != nil {
		return Group{}, proofError(err)
	}
	action := StatementLeave
	if join {
		action = StatementJoin
	}
	var fields []FieldError
	if st.Group != gid {
		fields = append(fields, FieldError{Field: "/group", Description: fmt.Sprintf("must be %q, the group of the request", gid)})
	}
	if st.Thing != thing {
		fields = append(fields, FieldError{Field: "/thing", Description: "must be the Thing id of the request"})
	}
	if st.Action != action {
		fields = append(fields, FieldError{Field: "/action", Description: fmt.Sprintf("must be %q for this method", action)})
	}
	if len(fields) > 0 {
		return Group{}, &Error{Code: EINVALID, Message: "the statement does not say this request", Fields: fields}
	}
	r.mu.RLock()
	b := r.bindings[thing]
	r.mu.RUnlock()
	if b == nil {
		return Group{}, Errorf(EFORBIDDEN, "the Thing id %q is not bound to a key: only a Thing that registered a signed description may join or leave by itself", thing)
	}
	if res.DID != b.DID {
		return Group{}, Errorf(EFORBIDDEN, "the Thing %q is bound to another key (%s) than the statement's signer", thing, b.DID)
	}
	if err := r.checkFresh(res.Created); err != nil {
		return Group{}, err
	}
	skew := r.opts.Security.MaxClockSkew
	now := r.opts.Now()
	if err := r.selfJoins.accept(gid+"\x00"+thing, res.Created, now.Add(-skew), join, now); err != nil {
		return Group{}, err
	}
	kind := groupRemove
	if join {
		kind = groupAdd
	}
	// Its credential is charged to its address: a statement needs no
	// token, so a loop of fresh ids from one address is paced as one.
	is := Issuance{Key: "addr:" + SourceOf(from), Anonymous: true}
	return r.groupOp(ctx, &groupOp{kind: kind, spec: GroupSpec{ID: gid}, member: thing, self: true, issuance: is})
}

// readStatement parses a statement: exactly group, thing, action and
// proof, no member twice.
func readStatement(raw []byte) (membershipStatement, error) {
	var st membershipStatement
	if len(bytes.TrimSpace(raw)) == 0 {
		return st, Errorf(EUNAUTHORIZED, "a token, or in a self-join group a statement signed by the Thing's key, is required")
	}
	if len(raw) > MaxStatementBytes {
		return st, TooLarge(len(raw), MaxStatementBytes)
	}
	if !json.Valid(raw) {
		return st, Errorf(EINVALID, `the statement is not JSON: it is {"group", "thing", "action": "join"|"leave", "proof"}`)
	}
	if ptr, dup := jsonx.DuplicateMember(raw); dup {
		return st, &Error{Code: EINVALID, Message: "the statement has a member twice", Fields: []FieldError{{Field: ptr, Description: "appears twice"}}}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, &Error{Code: EINVALID, Message: `the statement must be {"group", "thing", "action": "join"|"leave", "proof"} and nothing else`, Err: err}
	}
	if len(st.Proof) == 0 || bytes.Equal(st.Proof, []byte("null")) {
		return st, Errorf(EUNAUTHORIZED, "the statement carries no proof: sign it with the key the Thing id is bound to (PROTOCOL §7), or send a token")
	}
	return st, nil
}

// checkFresh refuses a statement created outside security.maxClockSkew of
// now, or before the registry started (its replay memory is from then).
func (r *Registry) checkFresh(created time.Time) error {
	if created.IsZero() {
		return &Error{Code: EINVALID, Message: "the proof has no created time",
			Fields: []FieldError{{Field: "/proof/created", Description: "is required"}}}
	}
	now, skew := r.opts.Now(), r.opts.Security.MaxClockSkew
	if created.After(now.Add(skew)) {
		return &Error{Code: EINVALID, Limit: "security.maxClockSkew",
			Message: fmt.Sprintf("the statement was signed %s, more than %s after the hub's time %s", created.UTC().Format(time.RFC3339), skew, now.UTC().Format(time.RFC3339)),
			Fields:  []FieldError{{Field: "/proof/created", Description: "is in the future"}}}
	}
	if created.Before(now.Add(-skew)) || created.Before(r.selfJoins.since) {
		return &Error{Code: ECONFLICT, Limit: "security.maxClockSkew",
			Message: fmt.Sprintf("stale statement: signed %s, more than %s before the hub's time %s or before the hub started; sign a new one",
				created.UTC().Format(time.RFC3339), skew, now.UTC().Format(time.RFC3339))}
	}
	return nil
}

// PutGroupIf is PutGroup while the group's modified time is modified (the
// version a conditional write names), compared in the write loop.
// EPRECONDITION when the group changed or is gone.
func (r *Registry) PutGroupIf(ctx context.Context, s GroupSpec, modified time.Time) (Group, error) {
	return r.groupOp(ctx, &groupOp{kind: groupPut, spec: s, ifModified: &modified})
}

// DissolveGroupIf is DissolveGroup while the group's modified time is
// modified.
func (r *Registry) DissolveGroupIf(ctx context.Context, id string, modified time.Time) error {
	if err := ValidateGroupID(id); err != nil {
		return err
	}
	_, err := r.groupOp(ctx, &groupOp{kind: groupDissolve, spec: GroupSpec{ID: id}, ifModified: &modified})
	return err
}

// PatchGroup changes the group id to what edit makes of it. The write
// loop calls edit with the group as committed so far, so a merge patch
// applied there never undoes a concurrent change; edit must be quick and
// must not write to the registry. ENOTFOUND when the group is absent.
func (r *Registry) PatchGroup(ctx context.Context, id string, edit func(Group) (GroupSpec, error)) (Group, error) {
	if err := ValidateGroupID(id); err != nil {
		return Group{}, err
	}
	gop := &groupOp{kind: groupPut, spec: GroupSpec{ID: id}, edit: edit}
	if err := r.submit(ctx, &op{kind: opGroup, id: id, group: gop}).err; err != nil {
		return Group{}, err
	}
	return *gop.result, nil
}

// precondition checks what gop requires of the group as the batch left it
// (old, nil when absent), and makes an edit's spec; called in the write
// loop.
func (gop *groupOp) precondition(old *Group) error {
	if gop.edit != nil {
		if old == nil {
			return Errorf(ENOTFOUND, "no group %q", gop.spec.ID)
		}
		spec, err := gop.edit(*old.clone())
		if err != nil {
			return err
		}
		spec.ID = gop.spec.ID
		if err := spec.validate(); err != nil {
			return err
		}
		gop.spec = spec
	}
	if gop.ifModified != nil && (old == nil || !old.Modified.Equal(*gop.ifModified)) {
		return Errorf(EPRECONDITION, "the group %q changed since it was read", gop.spec.ID)
	}
	if gop.self && old != nil && !old.SelfJoin {
		return Errorf(EFORBIDDEN, "the group %q does not let Things join or leave by themselves", gop.spec.ID)
	}
	return nil
}
