package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Agent groups (PROTOCOL §7). A group is a named set of registered Things.
// Membership opens the group's channels (lmos/v1/groups/{gid}/#) to a
// member and is carried by a credential the hub issues; removing a member
// or dissolving the group revokes both at once. Group changes go through
// the registry's write loop, so they are committed in the same order as
// the Things they name (adding a Thing that a concurrent delete removes
// cannot leave a member that does not exist), and the doors hear of a
// revocation (OnMembershipChange) before its writer is answered.

// Limits of groups (PROTOCOL §10.0): every group and member costs a
// durable record and a credential, so both are bounded.
const (
	MaxGroups            = 1024
	MaxGroupMembers      = 1024
	MaxGroupsPerThing    = 64
	MaxGroupTitle        = 200
	MaxGroupDescription  = 2000
	MaxGroupIDLength     = 64
	MaxStatusListEntries = 131072 // one Bitstring Status List (W3C: at least 131,072 entries)
)

// Group events on the hub's feed (/api/events, lmos/v1/hub/events): state,
// not directory history, so not numbered or logged (as presence).
const EventGroup EventType = "group"

// Group actions reported by a group event.
const (
	GroupCreated       = "created"
	GroupUpdated       = "updated"
	GroupDissolved     = "dissolved"
	GroupMemberAdded   = "member_added"
	GroupMemberRemoved = "member_removed"
)

// Group is an agent group as stored.
type Group struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	// RequireSigned admits only verified Things (lmos:verified).
	RequireSigned bool `json:"requireSigned"`
	// SelfJoin lets a Thing add or remove itself with a proof by the key
	// its id is bound to (the door checks the proof).
	SelfJoin bool      `json:"selfJoin"`
	Created  time.Time `json:"created"`
	Modified time.Time `json:"modified"`
	// Members are sorted by Thing id.
	Members []Member `json:"members"`
}

// Member is one Thing's membership of a group.
type Member struct {
	Thing string `json:"thing"`
	// DID is the key the Thing was verified by when it joined ("" when
	// unverified).
	DID   string    `json:"did,omitempty"`
	Since time.Time `json:"since"`
	// StatusIndex is the membership credential's entry in the hub's
	// status list; revoking the membership sets that bit.
	StatusIndex int `json:"statusIndex"`
	// CredentialUntil and CredentialList are the validUntil and status
	// list URL of the signed membership credential (zero when the hub
	// issued none: RegistryOptions.Issuer unset). The credential itself
	// is kept in the store only (Store.MemberCredential): at ~2 KB each,
	// a hub full of memberships would hold 130 MB of them in memory.
	CredentialUntil time.Time `json:"credentialUntil,omitzero"`
	CredentialList  string    `json:"credentialList,omitempty"`
	// gen is the status list generation StatusIndex is of, set by whoever
	// has the member sign (not stored: the list says it).
	gen int
}

// SetCredential sets what m says of its credential cred.
func (m *Member) SetCredential(cred json.RawMessage) {
	m.CredentialUntil, m.CredentialList = credentialUntil(cred)
}

// MemberIDs returns the Thing ids of g's members, sorted.
func (g *Group) MemberIDs() []string {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.Thing
	}
	return ids
}

// Member returns the membership of thing, if it is a member.
func (g *Group) Member(thing string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(g.Members, thing, func(m Member, t string) int { return strings.Compare(m.Thing, t) })
	if !ok {
		return Member{}, false
	}
	return g.Members[i], true
}

func (g *Group) clone() *Group {
	c := *g
	c.Members = slices.Clone(g.Members)
	return &c
}

// GroupEvent describes a group change on the hub's feed.
type GroupEvent struct {
	Action string `json:"action"`
	Group  string `json:"group"`
	// Member is the Thing of a member_added / member_removed event.
	Member string `json:"member,omitempty"`
}

// MembershipChange tells the doors that a Thing lost or gained a group:
// on a loss they drop its subscriptions and stop its group traffic.
type MembershipChange struct {
	Group string
	Thing string
	Added bool
	// Batch numbers the committed batch the change is of (from 1): every
	// change of one batch is passed on, one after another, before the
	// next batch's, so a door may share work among them (the broker looks
	// its sessions up once for a dissolution of 1,024 members).
	Batch uint64
}

// GroupSpec is what a writer says of a group: everything but the
// timestamps and the members' credentials.
type GroupSpec struct {
	ID            string
	Title         string
	Description   string
	RequireSigned bool
	SelfJoin      bool
	Members       []string
}

// MembershipIssuer signs membership credentials (the hub's key, lmos/vc).
type MembershipIssuer interface {
	// Issue returns the signed credential of m's membership of g.
	Issue(g *Group, m *Member, now time.Time) (json.RawMessage, error)
}

// StatusList is the revocation state of every issued membership
// credential: bit i is set when the credential with StatusIndex i is
// revoked (W3C Bitstring Status List order: bit 0 is the first byte's
// most significant bit).
type StatusList struct {
	// Next is where the search for a free entry starts.
	Next int `json:"next"`
	// Bits has MaxStatusListEntries/8 bytes.
	Bits []byte `json:"bits"`
	// Modified is when a bit last changed.
	Modified time.Time `json:"modified"`
	// Sealed are revoked entries that are free again once SealedUntil +
	// StatusReuseGrace has passed; PendingUntil bounds the credentials of
	// the entries revoked since they were sealed (hub/statusentries.go).
	Sealed       []byte    `json:"sealed,omitempty"`
	SealedUntil  time.Time `json:"sealedUntil,omitzero"`
	PendingUntil time.Time `json:"pendingUntil,omitzero"`
	// Generation numbers the list: a rotation (hub/statusrotate.go)
	// starts a new one at a new URL, every entry of the old one revoked.
	Generation int `json:"generation,omitempty"`
	// inUse marks the entries members hold (from the groups, not stored).
	inUse []byte
}

func (s *StatusList) revoked(i int) bool { return bitSet(s.Bits, i) }

func (s *StatusList) revoke(i int) { setBit(s.Bits, i) }

var groupIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidateGroupID checks a group id: it is one MQTT topic level and one URL
// path segment, so only letters, digits, '.', '_' and '-'.
func ValidateGroupID(id string) error {
	if id == "" || len(id) > MaxGroupIDLength || !groupIDPattern.MatchString(id) {
		return &Error{Code: EINVALID, Message: "invalid group id",
			Fields: []FieldError{{Field: "/id", Description: "a group id is 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit"}}}
	}
	return nil
}

func (s *GroupSpec) validate() error {
	if err := ValidateGroupID(s.ID); err != nil {
		return err
	}
	var fields []FieldError
	if strings.TrimSpace(s.Title) == "" {
		fields = append(fields, FieldError{Field: "/title", Description: "a group needs a title"})
	} else if utf8.RuneCountInString(s.Title) > MaxGroupTitle || !utf8.ValidString(s.Title) {
		fields = append(fields, FieldError{Field: "/title", Description: "a title is valid UTF-8 of at most 200 characters"})
	}
	if utf8.RuneCountInString(s.Description) > MaxGroupDescription || !utf8.ValidString(s.Description) {
		fields = append(fields, FieldError{Field: "/description", Description: "a description is valid UTF-8 of at most 2000 characters"})
	}
	if len(s.Members) > MaxGroupMembers {
		fields = append(fields, FieldError{Field: "/members", Description: "a group has at most 1024 members"})
	}
	for i, m := range s.Members {
		if err := ValidateID(m); err != nil {
			fields = append(fields, FieldError{Field: "/members/" + strconv.Itoa(i), Description: "not a Thing id"})
		}
	}
	if len(fields) > 0 {
		return &Error{Code: EINVALID, Message: "invalid group", Fields: fields}
	}
	return nil
}

// groupOpKind says what an opGroup does.
type groupOpKind int

const (
	groupCreate groupOpKind = iota
	groupPut
	groupDissolve
	groupAdd
	groupRemove
	groupRotate
	groupRenew
)

// groupOp is the group part of an opGroup.
type groupOp struct {
	kind groupOpKind
	spec GroupSpec
	// member is the Thing of groupAdd / groupRemove.
	member string
	// result is the group after the op (nil when dissolved).
	result *Group
	// created reports that a groupPut created the group.
	created bool
	// self marks a Thing's own signed statement (hub/groupjoin.go): the
	// group must allow self-join when the op is applied.
	self bool
	// ifModified, when set, requires the group to exist with this
	// modified time (a conditional write, hub/groupjoin.go).
	ifModified *time.Time
	// edit, when set, makes a groupPut's spec from the group as the
	// write loop finds it (PatchGroup, hub/groupjoin.go).
	edit func(Group) (GroupSpec, error)
	// issuance says whom the credentials it issues are charged to.
	issuance Issuance
	// rotated is what a groupRotate did.
	rotated Rotation
	// renew are the memberships a groupRenew renews; renewed counts them.
	renew   []renewDue
	renewed int
}

// CreateGroup creates a group (ECONFLICT when the id is taken, ENOTFOUND
// when a member is not a registered Thing).
func (r *Registry) CreateGroup(ctx context.Context, s GroupSpec) (Group, error) {
	return r.groupOp(ctx, &groupOp{kind: groupCreate, spec: s})
}

// PutGroup creates the group or replaces what its writer says of it:
// members that are not in s.Members lose their membership, new ones get
// theirs. created reports a new group.
func (r *Registry) PutGroup(ctx context.Context, s GroupSpec) (g Group, created bool, err error) {
	gop := &groupOp{kind: groupPut, spec: s}
	g, err = r.groupOp(ctx, gop)
	return g, gop.created, err
}

// DissolveGroup deletes a group and revokes every membership.
func (r *Registry) DissolveGroup(ctx context.Context, id string) error {
	if err := ValidateGroupID(id); err != nil {
		return err
	}
	_, err := r.groupOp(ctx, &groupOp{kind: groupDissolve, spec: GroupSpec{ID: id}})
	return err
}

// AddMember makes thing a member of group gid (a member already: no change).
func (r *Registry) AddMember(ctx context.Context, gid, thing string) (Group, error) {
	if err := ValidateGroupID(gid); err != nil {
		return Group{}, err
	}
	if err := ValidateID(thing); err != nil {
		return Group{}, err
	}
	return r.groupOp(ctx, &groupOp{kind: groupAdd, spec: GroupSpec{ID: gid}, member: thing})
}

// RemoveMember ends thing's membership of gid and revokes its credential
// (ENOTFOUND when it is not a member).
func (r *Registry) RemoveMember(ctx context.Context, gid, thing string) (Group, error) {
	if err := ValidateGroupID(gid); err != nil {
		return Group{}, err
	}
	if err := ValidateID(thing); err != nil {
		return Group{}, err
	}
	return r.groupOp(ctx, &groupOp{kind: groupRemove, spec: GroupSpec{ID: gid}, member: thing})
}

func (r *Registry) groupOp(ctx context.Context, gop *groupOp) (Group, error) {
	if gop.kind == groupCreate || gop.kind == groupPut {
		if err := gop.spec.validate(); err != nil {
			return Group{}, err
		}
	}
	if !gop.self {
		gop.issuance = issuanceOf(ctx)
	}
	if err := r.submit(ctx, &op{kind: opGroup, id: gop.spec.ID, group: gop}).err; err != nil {
		return Group{}, err
	}
	if gop.result == nil {
		return Group{}, nil
	}
	return *gop.result, nil
}

// Group returns the group id, or ENOTFOUND.
func (r *Registry) Group(id string) (Group, error) {
	r.mu.RLock()
	g := r.groups[id]
	r.mu.RUnlock()
	if g == nil {
		return Group{}, Errorf(ENOTFOUND, "no group %q", id)
	}
	return *g.clone(), nil
}

// Groups returns every group, sorted by id.
func (r *Registry) Groups() []Group {
	out, _ := r.GroupsSnapshot()
	return out
}

// GroupsSnapshot returns every group, sorted by id, and the generation of
// the groups they are: it moves with every change of any group, so a door
// may keep an encoding of them until it moves (GroupsGen).
func (r *Registry) GroupsSnapshot() ([]Group, uint64) {
	r.mu.RLock()
	out := make([]Group, 0, len(r.groups))
	for _, g := range r.groups {
		out = append(out, *g.clone())
	}
	gen := r.groupsGen
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Group) int { return strings.Compare(a.ID, b.ID) })
	return out, gen
}

// GroupsGen is the groups' generation now (GroupsSnapshot).
func (r *Registry) GroupsGen() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.groupsGen
}

// IsMember reports whether thing is a member of group gid now. The doors
// ask it on every group-channel publish, subscribe and delivery.
func (r *Registry) IsMember(gid, thing string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g := r.groups[gid]
	if g == nil {
		return false
	}
	_, ok := g.Member(thing)
	return ok
}

// GroupsOf returns the ids of the groups thing is a member of, sorted.
func (r *Registry) GroupsOf(thing string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for id, g := range r.groups {
		if _, ok := g.Member(thing); ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// StatusList returns a copy of the credential status list.
func (r *Registry) StatusList() StatusList {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := r.status
	s.Bits = slices.Clone(s.Bits)
	return s
}

// Revoked reports whether status entry i of the current list is revoked
// (its bit is cleared again once every credential on it has expired).
func (r *Registry) Revoked(i int) bool {
	if i < 0 || i >= MaxStatusListEntries {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.status.revoked(i)
}

// OnMembershipChange registers fn, called in the write loop for every
// membership a committed batch added or removed, before any writer of
// that batch is answered: a door that drops a removed member's access in
// fn has done so before the removal is acknowledged. fn must not block
// nor write to the registry.
func (r *Registry) OnMembershipChange(fn func(MembershipChange)) {
	r.mu.Lock()
	r.membershipFns = append(r.membershipFns, fn)
	r.mu.Unlock()
}

// currentGroup returns the group id as the batch so far left it.
func (r *Registry) currentGroup(id string) *Group {
	if g, ok := r.groupOverlay[id]; ok {
		return g
	}
	r.mu.RLock()
	g := r.groups[id]
	r.mu.RUnlock()
	return g
}

// groupCount is the number of groups as the batch so far left them.
func (r *Registry) groupCount() int {
	r.mu.RLock()
	n := len(r.groups)
	for id, g := range r.groupOverlay {
		_, had := r.groups[id]
		switch {
		case g != nil && !had:
			n++
		case g == nil && had:
			n--
		}
	}
	r.mu.RUnlock()
	return n
}

// batchGroupIDs returns the ids of the stored groups and of those the
// batch so far touched, sorted (a dissolved one may be among them).
func (r *Registry) batchGroupIDs() []string {
	r.mu.RLock()
	ids := make([]string, 0, len(r.groups)+len(r.groupOverlay))
	for id := range r.groups {
		ids = append(ids, id)
	}
	r.mu.RUnlock()
	for id := range r.groupOverlay {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// groupsOfCount is the number of groups thing is a member of, as the
// batch so far left them.
func (r *Registry) groupsOfCount(thing string) int {
	n := 0
	for _, id := range r.batchGroupIDs() {
		if g := r.currentGroup(id); g != nil {
			if _, ok := g.Member(thing); ok {
				n++
			}
		}
	}
	return n
}

// prepareGroup applies an opGroup to the batch's group overlay and
// returns its events. Called in the write loop.
func (r *Registry) prepareGroup(o *op, now time.Time) ([]Event, error) {
	gop := o.group
	switch gop.kind {
	case groupRotate:
		return r.prepareRotate(gop, now)
	case groupRenew:
		return r.prepareRenew(gop, now)
	}
	old := r.currentGroup(gop.spec.ID)
	if err := gop.precondition(old); err != nil {
		return nil, err
	}
	switch gop.kind {
	case groupCreate, groupPut:
		return r.preparePut(gop, old, now)
	case groupDissolve:
		return r.prepareDissolve(gop, old)
	case groupAdd:
		return r.prepareAdd(gop, old, now)
	case groupRemove:
		return r.prepareRemove(gop, old, now)
	}
	return nil, Errorf(EINTERNAL, "unknown group operation")
}

// preparePut creates the group or replaces its settings and member list
// (old is nil when it does not exist yet).
func (r *Registry) preparePut(gop *groupOp, old *Group, now time.Time) ([]Event, error) {
	if old != nil && gop.kind == groupCreate {
		return nil, Errorf(ECONFLICT, "the group %q exists", gop.spec.ID)
	}
	var g *Group
	var evs []Event
	if old == nil {
		if r.groupCount() >= MaxGroups {
			return nil, &Error{Code: EFULL, Message: fmt.Sprintf("the hub holds %d groups, its limit", MaxGroups), Limit: "groups.max"}
		}
		g = &Group{ID: gop.spec.ID, Created: now}
		gop.created = true
		evs = append(evs, groupEvent(GroupCreated, g.ID, ""))
	} else {
		g = old.clone()
		evs = append(evs, groupEvent(GroupUpdated, g.ID, ""))
	}
	g.Title, g.Description = gop.spec.Title, gop.spec.Description
	g.RequireSigned, g.SelfJoin = gop.spec.RequireSigned, gop.spec.SelfJoin
	g.Modified = now
	want := slices.Sorted(slices.Values(gop.spec.Members))
	want = slices.Compact(want)
	if err := r.checkWanted(gop, g, want, now); err != nil {
		return nil, err
	}
	var kept []Member
	for _, m := range g.Members {
		if slices.Contains(want, m.Thing) {
			kept = append(kept, m)
			continue
		}
		r.revokeMember(g, m)
		evs = append(evs, groupEvent(GroupMemberRemoved, g.ID, m.Thing))
	}
	g.Members = kept
	for _, m := range want {
		if _, ok := g.Member(m); ok {
			continue
		}
		if err := r.addMember(g, m, now); err != nil {
			return nil, err
		}
		evs = append(evs, groupEvent(GroupMemberAdded, g.ID, m))
	}
	r.groupOverlay[g.ID] = g
	gop.result = g.clone()
	return evs, nil
}

// checkWanted checks every member of want for g (with g's new settings)
// before anything changes: each new one may join, a kept one is verified
// when g requires signed members, and the credentials for the new ones
// may be issued.
func (r *Registry) checkWanted(gop *groupOp, g *Group, want []string, now time.Time) error {
	added := 0
	for _, m := range want {
		if _, ok := g.Member(m); ok {
			if g.RequireSigned && r.verifiedDID(m, now) == "" {
				return Errorf(ECONFLICT, "the group requires signed members and %q is not verified", m)
			}
			continue
		}
		if err := r.checkNewMember(g, m, now); err != nil {
			return err
		}
		added++
	}
	return r.checkIssue(gop.issuance, added, now)
}

// prepareDissolve removes every member of old, then old.
func (r *Registry) prepareDissolve(gop *groupOp, old *Group) ([]Event, error) {
	if old == nil {
		return nil, Errorf(ENOTFOUND, "no group %q", gop.spec.ID)
	}
	var evs []Event
	for _, m := range old.Members {
		r.revokeMember(old, m)
		evs = append(evs, groupEvent(GroupMemberRemoved, old.ID, m.Thing))
	}
	r.groupOverlay[old.ID] = nil
	return append(evs, groupEvent(GroupDissolved, old.ID, "")), nil
}

// prepareAdd adds gop.member to old; a member already is errUnchanged.
func (r *Registry) prepareAdd(gop *groupOp, old *Group, now time.Time) ([]Event, error) {
	if old == nil {
		return nil, Errorf(ENOTFOUND, "no group %q", gop.spec.ID)
	}
	if _, ok := old.Member(gop.member); ok {
		gop.result = old.clone()
		return nil, errUnchanged
	}
	if err := r.checkNewMember(old, gop.member, now); err != nil {
		return nil, err
	}
	if err := r.checkIssue(gop.issuance, 1, now); err != nil {
		return nil, err
	}
	g := old.clone()
	if err := r.addMember(g, gop.member, now); err != nil {
		return nil, err
	}
	g.Modified = now
	r.groupOverlay[g.ID] = g
	gop.result = g.clone()
	return []Event{groupEvent(GroupMemberAdded, g.ID, gop.member)}, nil
}

// prepareRemove removes gop.member from old.
func (r *Registry) prepareRemove(gop *groupOp, old *Group, now time.Time) ([]Event, error) {
	if old == nil {
		return nil, Errorf(ENOTFOUND, "no group %q", gop.spec.ID)
	}
	m, ok := old.Member(gop.member)
	if !ok {
		return nil, Errorf(ENOTFOUND, "%q is not a member of the group %q", gop.member, old.ID)
	}
	g := old.clone()
	r.revokeMember(g, m)
	g.Members = slices.DeleteFunc(g.Members, func(x Member) bool { return x.Thing == m.Thing })
	g.Modified = now
	r.groupOverlay[g.ID] = g
	gop.result = g.clone()
	return []Event{groupEvent(GroupMemberRemoved, g.ID, m.Thing)}, nil
}

func groupEvent(action, gid, member string) Event {
	return Event{Type: EventGroup, ID: gid, Group: &GroupEvent{Action: action, Group: gid, Member: member}}
}

// verifiedDID is the DID thing is verified by now ("" when it is not
// registered or not verified).
func (r *Registry) verifiedDID(thing string, now time.Time) string {
	t := r.current(thing, now)
	if t == nil {
		return ""
	}
	return t.Meta.Verified
}

// checkNewMember refuses thing as a new member of g.
func (r *Registry) checkNewMember(g *Group, thing string, now time.Time) error {
	t := r.current(thing, now)
	if t == nil {
		return Errorf(ENOTFOUND, "no Thing %q is registered", thing)
	}
	if g.RequireSigned && t.Meta.Verified == "" {
		return Errorf(EFORBIDDEN, "the group %q admits only verified Things; %q registered an unsigned description", g.ID, thing)
	}
	if len(g.Members) >= MaxGroupMembers {
		return &Error{Code: EFULL, Message: fmt.Sprintf("the group %q has %d members, its limit", g.ID, MaxGroupMembers), Limit: "groups.maxMembers"}
	}
	if r.groupsOfCount(thing) >= MaxGroupsPerThing {
		return &Error{Code: EFULL, Message: fmt.Sprintf("%q is a member of %d groups, the limit", thing, MaxGroupsPerThing), Limit: "groups.maxPerThing"}
	}
	return nil
}

// batchStatus is the status list as the batch changes it; the first
// group write of a batch also reclaims entries whose credentials expired.
func (r *Registry) batchStatus() *StatusList {
	if r.statusOverlay == nil {
		r.mu.RLock()
		s := r.status.clone()
		r.mu.RUnlock()
		s.reclaim(r.opts.Now())
		r.statusOverlay = &s
	}
	return r.statusOverlay
}

// addMember adds thing to g (in the overlay) with a new credential on a
// free entry (checkIssue made sure there is one).
func (r *Registry) addMember(g *Group, thing string, now time.Time) error {
	st := r.batchStatus()
	idx, ok := st.takeEntry(r.statusCapacity())
	if !ok {
		return &Error{Code: EFULL, Message: "the hub's status list has no free entry", Limit: "groups.statusList"}
	}
	m := Member{Thing: thing, DID: r.verifiedDID(thing, now), Since: now, StatusIndex: idx, gen: st.Generation}
	if r.opts.Issuer != nil {
		vc, err := r.opts.Issuer.Issue(g, &m, now)
		if err != nil {
			return &Error{Code: EINTERNAL, Message: "cannot issue the membership credential", Err: err}
		}
		r.setCredential(&m, vc)
		r.credChanges = append(r.credChanges, MemberCredential{Group: g.ID, Thing: thing, Credential: vc})
	}
	setBit(st.inUse, idx)
	st.Next = idx + 1
	i, _ := slices.BinarySearchFunc(g.Members, thing, func(m Member, t string) int { return strings.Compare(m.Thing, t) })
	g.Members = slices.Insert(g.Members, i, m)
	r.membershipChanges = append(r.membershipChanges, MembershipChange{Group: g.ID, Thing: thing, Added: true})
	return nil
}

// revokeMember sets m's status bit; the caller drops m from g.
func (r *Registry) revokeMember(g *Group, m Member) {
	st := r.batchStatus()
	now := r.opts.Now()
	st.revoke(m.StatusIndex)
	clearBit(st.inUse, m.StatusIndex)
	if until := r.revokedUntil(m, now); until.After(st.PendingUntil) {
		st.PendingUntil = until
	}
	st.Modified = now
	r.membershipChanges = append(r.membershipChanges, MembershipChange{Group: g.ID, Thing: m.Thing})
	r.credChanges = append(r.credChanges, MemberCredential{Group: g.ID, Thing: m.Thing})
}

// setCredential sets what m says of its credential cred, sharing the
// list URL's string among members (they all name one or two lists).
func (r *Registry) setCredential(m *Member, cred json.RawMessage) {
	m.SetCredential(cred)
	m.CredentialList = r.internList(m.CredentialList)
}

// internList returns the list URL u as kept before, if it was. Called
// in the write loop or before it starts.
func (r *Registry) internList(u string) string {
	if u == "" {
		return ""
	}
	if k, ok := r.listURLs[u]; ok {
		return k
	}
	if r.listURLs == nil || len(r.listURLs) >= 16 {
		r.listURLs = map[string]string{} // a new hub URL or many rotations
	}
	r.listURLs[u] = u
	return u
}

// dropMemberships removes a deleted Thing from every group it is in: a
// new Thing registered later under the same id is not the member.
func (r *Registry) dropMemberships(thing string, now time.Time) []Event {
	var evs []Event
	for _, id := range r.batchGroupIDs() {
		old := r.currentGroup(id)
		if old == nil {
			continue
		}
		m, ok := old.Member(thing)
		if !ok {
			continue
		}
		g := old.clone()
		r.revokeMember(g, m)
		g.Members = slices.DeleteFunc(g.Members, func(x Member) bool { return x.Thing == thing })
		g.Modified = now
		r.groupOverlay[id] = g
		evs = append(evs, groupEvent(GroupMemberRemoved, id, thing))
	}
	return evs
}

// groupChanges moves the batch's group changes into b.
func (r *Registry) groupChanges(b *Batch) {
	for id, g := range r.groupOverlay {
		if g == nil {
			b.DeleteGroups = append(b.DeleteGroups, id)
		} else {
			b.Groups = append(b.Groups, *g)
		}
	}
	slices.Sort(b.DeleteGroups)
	slices.SortFunc(b.Groups, func(a, b Group) int { return strings.Compare(a.ID, b.ID) })
	if r.statusOverlay != nil {
		s := *r.statusOverlay
		b.StatusList = &s
	}
	b.MemberCredentials = r.credChanges
}

// installGroups makes the committed group changes visible; under r.mu.
func (r *Registry) installGroups() {
	if len(r.groupOverlay) > 0 {
		r.groupsGen++
	}
	for id, g := range r.groupOverlay {
		if g == nil {
			delete(r.groups, id)
		} else {
			r.groups[id] = g
		}
	}
	if r.statusOverlay != nil {
		r.status = *r.statusOverlay
	}
}

// notifyMemberships calls the OnMembershipChange functions with the
// committed batch's changes.
func (r *Registry) notifyMemberships() {
	if len(r.membershipChanges) == 0 {
		return
	}
	r.mu.RLock()
	fns := slices.Clone(r.membershipFns)
	r.mu.RUnlock()
	r.membershipBatch++
	for _, c := range r.membershipChanges {
		c.Batch = r.membershipBatch
		for _, fn := range fns {
			fn(c)
		}
	}
}

// loadGroups reads the stored groups and status list at start.
func (r *Registry) loadGroups() error {
	if err := r.store.LoadGroups(func(g Group) error {
		for i := range g.Members {
			g.Members[i].CredentialList = r.internList(g.Members[i].CredentialList)
		}
		r.groups[g.ID] = &g
		return nil
	}); err != nil {
		return err
	}
	st, err := r.store.LoadStatusList()
	if err != nil {
		return err
	}
	r.status = r.loadStatus(st)
	return nil
}

// applyGroup prepares an opGroup in the write loop, keeping the batch's
// status list and membership changes as they were when it fails.
func (r *Registry) applyGroup(o *op, now time.Time) ([]Event, error) {
	var saved *StatusList
	if r.statusOverlay != nil {
		s := r.statusOverlay.clone()
		saved = &s
	}
	n, nc := len(r.membershipChanges), len(r.credChanges)
	evs, err := r.prepareGroup(o, now)
	if err != nil {
		r.statusOverlay = saved
		r.membershipChanges = r.membershipChanges[:n]
		r.credChanges = r.credChanges[:nc]
		return nil, err
	}
	return evs, nil
}
