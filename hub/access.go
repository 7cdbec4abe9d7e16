package hub

import (
	"context"
	"fmt"
	"time"
)

// One access policy for every door (PROTOCOL §3.5, §10 "Access"). Each
// door (HTTP directory and proxy, the hub API, MQTT, WebSocket) says who is
// asking (a Principal) and what for (an Op on a Thing), and Access.Allow
// decides; no door keeps rules of its own, so one request gets the same
// answer whichever door it comes through.

// Scope is what a bearer token allows.
type Scope string

// Token scopes, from least to most.
const (
	// ScopeRead reads the directory, reads and observes properties and
	// subscribes to events of Things that do not require security.
	ScopeRead Scope = "read"
	// ScopeOperate is read, and writes properties and invokes actions of
	// any Thing, and every interaction with a Thing that requires security.
	ScopeOperate Scope = "operate"
	// ScopeAdmin is everything: operate and managing the hub (directory
	// writes, tokens, the hub API).
	ScopeAdmin Scope = "admin"
)

// Scopes are the valid token scopes, least first.
var Scopes = []Scope{ScopeRead, ScopeOperate, ScopeAdmin}

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return s.level() > levelNone }

// Access levels, ordered: a principal at one level may do what any lower
// level may.
type level int

const (
	levelNone level = iota
	levelRead
	levelOperate
	levelAdmin
)

func (s Scope) level() level {
	switch s {
	case ScopeRead:
		return levelRead
	case ScopeOperate:
		return levelOperate
	case ScopeAdmin:
		return levelAdmin
	}
	return levelNone
}

// Anonymous access settings (access.anonymous).
const (
	AnonymousNone    = "none"
	AnonymousRead    = "read"
	AnonymousOperate = "operate"
)

// AnonymousLevels are the valid values of access.anonymous.
var AnonymousLevels = []string{AnonymousNone, AnonymousRead, AnonymousOperate}

// Operations the policy decides besides the interactions (Op* in
// interaction.go).
const (
	// OpReadDirectory reads Thing Descriptions: the directory API, the
	// retained …/td and …/status topics, the hub's status.
	OpReadDirectory Op = "readdirectory"
	// OpManage changes the directory or the hub: TD writes through the
	// directory API, tokens, the hub API.
	OpManage Op = "manage"
	// OpManageGroups creates, changes and dissolves agent groups and their
	// memberships (PROTOCOL §7): tokens of scope operate or admin bound to
	// no Thing; no Thing manages groups by its connection or a token bound
	// to it (a Thing adds or removes itself only by a signed statement,
	// hub/groupjoin.go).
	OpManageGroups Op = "managegroups"
)

// PrincipalKind says how a consumer authenticated.
type PrincipalKind int

// The kinds of Principal.
const (
	// Anonymous: no credentials (a LAN client).
	Anonymous PrincipalKind = iota
	// ByToken: a bearer token (Principal.Token, its scope).
	ByToken
	// ByThing: a registered Thing, by its MQTT credentials or as the
	// WebSocket connection that registered it. A Thing the hub picked
	// (Principal.Admitted) may operate other Things (agents call agents);
	// one that joined itself while anyone could join has the rights of an
	// anonymous client. No Thing manages the hub.
	ByThing
	// ByPeer: a paired hub of the federation, by its signed request
	// (Principal.PeerDID; lmos.VerifyPeer): the rights of an operate
	// token, never more.
	ByPeer
)

// Principal is who asks: the consumer behind a request, connection or
// message.
type Principal struct {
	Kind PrincipalKind
	// Token is the token it authenticated with (ByToken).
	Token Token
	// ThingID is the Thing it authenticated as (ByThing).
	ThingID string
	// Admitted (ByThing) says the hub picked the Thing (ThingMeta.Admitted):
	// approved, joined in an admin's permit window, or written by an
	// admin. Under join.mode open anyone may join, so a Thing that joined
	// itself proves no more than an anonymous client does.
	Admitted bool
	// PeerDID is the paired hub it authenticated as (ByPeer).
	PeerDID string
	// Source is the client's address (hub.SourceOf), for logs.
	Source string
}

// PeerPrincipal is a paired hub whose signed request verified as did.
func PeerPrincipal(did, source string) Principal {
	return Principal{Kind: ByPeer, PeerDID: did, Source: source}
}

// AnonymousFrom is an anonymous principal at source.
func AnonymousFrom(source string) Principal { return Principal{Kind: Anonymous, Source: source} }

// TokenPrincipal is the principal of a verified token.
func TokenPrincipal(t Token, source string) Principal {
	return Principal{Kind: ByToken, Token: t, Source: source}
}

// ThingPrincipal is a Thing authenticated as id; admitted is its
// ThingMeta.Admitted, read when the decision is taken (an approval or an
// admin's write changes it while the Thing stays connected).
func ThingPrincipal(id, source string, admitted bool) Principal {
	return Principal{Kind: ByThing, ThingID: id, Source: source, Admitted: admitted}
}

// Authenticated reports whether the principal counts as an authenticated
// consumer: a token, or a Thing the hub picked. A Thing that joined itself
// under join.mode open presented credentials the hub gave to anyone.
func (p Principal) Authenticated() bool {
	return p.Kind == ByToken || p.Kind == ByPeer || p.Kind == ByThing && p.Admitted
}

// MemberOf is the Thing a principal speaks for on group channels: a Thing
// authenticated as itself, or the Thing a Thing-bound token names ("":
// none, an admin token included).
func MemberOf(p Principal) string {
	switch p.Kind {
	case ByThing:
		return p.ThingID
	case ByToken:
		return p.Token.Thing
	}
	return ""
}

// String names the principal in logs.
func (p Principal) String() string {
	switch p.Kind {
	case ByToken:
		return fmt.Sprintf("token %s (%s)", p.Token.ID, p.Token.EffectiveScope())
	case ByThing:
		return "thing " + p.ThingID
	case ByPeer:
		return "peer " + p.PeerDID
	}
	return "anonymous"
}

// Access is the one access policy. It is safe for concurrent use.
type Access struct {
	anon   level
	tokens *Tokens
	now    func() time.Time
}

// NewAccess returns the policy for access.anonymous anonymous (none, read
// or operate) under join mode joinMode: "approve" and "closed" decide who
// may join, and a hub that picks its members does not let anonymous
// clients operate them either, so they cap anonymous access at read.
// tokens rechecks a token principal on every decision (nil: no recheck),
// so a long-lived connection loses its rights when its token is revoked
// or expires.
func NewAccess(anonymous, joinMode string, tokens *Tokens) (*Access, error) {
	a := &Access{tokens: tokens, now: time.Now}
	switch anonymous {
	case AnonymousNone:
		a.anon = levelNone
	case AnonymousRead:
		a.anon = levelRead
	case AnonymousOperate, "":
		a.anon = levelOperate
	default:
		return nil, Errorf(EINVALID, "unknown access.anonymous %q (use none, read or operate)", anonymous)
	}
	if (joinMode == "approve" || joinMode == "closed") && a.anon > levelRead {
		a.anon = levelRead
	}
	return a, nil
}

// OpenAccess is the policy of a hub that configures none: anonymous
// operate (the home-friendly default).
func OpenAccess() *Access {
	a, _ := NewAccess(AnonymousOperate, "open", nil)
	return a
}

// Anonymous returns the effective anonymous level's name.
func (a *Access) Anonymous() string {
	switch a.anon {
	case levelNone:
		return AnonymousNone
	case levelRead:
		return AnonymousRead
	}
	return AnonymousOperate
}

// needs is the level op requires, and whether the principal must also be
// authenticated, on a Thing that requires security (secured) or not.
func needs(op Op, secured bool) (level, bool) {
	switch op {
	case OpReadDirectory:
		return levelRead, false
	case OpReadProperty, OpObserveProperty, OpSubscribeEvent:
		// Over MQTT a property read is a subscription to its topic, which
		// observes it too: read and observe need the same.
		if secured {
			return levelOperate, true
		}
		return levelRead, false
	case OpWriteProperty, OpInvokeAction:
		return levelOperate, secured
	case OpManageGroups:
		return levelOperate, true
	}
	return levelAdmin, true // OpManage and anything unknown
}

// Allow decides whether p may do op on thing (nil: no particular Thing,
// such as a directory listing, a wildcard subscription or an unknown id).
// A refusal is EUNAUTHORIZED (401) when credentials would help (p is
// anonymous, or its token is no longer valid) and EFORBIDDEN (403) when p
// authenticated and is not allowed.
func (a *Access) Allow(p Principal, op Op, thing *Thing) error {
	secured := thing != nil && thing.Summary != nil && thing.Summary.Secured()
	need, mustAuth := needs(op, secured)
	if p.Kind == Anonymous && a.anon >= need && !mustAuth {
		return nil // the common case on a LAN, without allocating
	}
	if op == OpManageGroups && (p.Kind == ByThing || p.Kind == ByPeer) {
		return Errorf(EFORBIDDEN, "managing groups needs a token of scope operate or admin; %s may not", p)
	}
	var have level
	switch p.Kind {
	case Anonymous:
		have = a.anon
	case ByToken:
		if a.tokens != nil {
			t, err := a.tokens.Recheck(p.Token)
			if err != nil {
				return err
			}
			p.Token = t
		} else if p.Token.Expired(a.now()) {
			return Errorf(EUNAUTHORIZED, "the bearer token expired on %s", p.Token.Expires.Format(time.RFC3339))
		}
		if op == OpManageGroups && p.Token.Thing != "" {
			// A Thing-bound token speaks for its Thing, and a Thing
			// changes its memberships only by its signed statement where
			// the group lets it: with an operate token bound to it, it
			// could otherwise join any group, selfJoin or not.
			return Errorf(EFORBIDDEN, "managing groups needs a token of scope operate or admin bound to no Thing; %s speaks for Thing %q, which joins or leaves only by its signed statement", p, p.Token.Thing)
		}
		have = p.Token.EffectiveScope().level()
	case ByPeer:
		have = levelOperate
	case ByThing:
		have = levelOperate
		if !p.Admitted {
			have = a.anon
		}
	}
	if have >= need && (!mustAuth || p.Authenticated()) {
		return nil
	}
	what := describeAccess(op, thing, secured)
	if p.Kind == ByThing && !p.Admitted {
		// A token would not help a Thing's connection: its MQTT
		// credentials or its WebSocket are the Thing's.
		return Errorf(EFORBIDDEN, "%s needs an authenticated consumer with scope %s; %s joined by itself while joining was open to all and has an anonymous client's rights (an administrator admits it by approving its join or writing its description)", what, scopeOf(need), p)
	}
	if !p.Authenticated() {
		if need == levelAdmin {
			return Errorf(EUNAUTHORIZED, "a bearer token is required: %s needs an admin token", what)
		}
		if mustAuth && a.anon >= need {
			return Errorf(EUNAUTHORIZED, "a bearer token is required: %s needs an authenticated consumer with scope %s", what, scopeOf(need))
		}
		return Errorf(EUNAUTHORIZED, "a bearer token is required: %s needs scope %s (access.anonymous is %s)", what, scopeOf(need), a.Anonymous())
	}
	return Errorf(EFORBIDDEN, "%s needs scope %s; %s may not", what, scopeOf(need), p)
}

// OpenToAll reports whether an anonymous client may do op on thing, so
// that everyone may (no principal has less than anonymous for reads).
func (a *Access) OpenToAll(op Op, thing *Thing) bool {
	need, mustAuth := needs(op, thing != nil && thing.Summary != nil && thing.Summary.Secured())
	return a.anon >= need && !mustAuth
}

func scopeOf(l level) Scope {
	switch l {
	case levelRead:
		return ScopeRead
	case levelOperate:
		return ScopeOperate
	}
	return ScopeAdmin
}

func describeAccess(op Op, thing *Thing, secured bool) string {
	if thing == nil {
		if op == OpReadDirectory {
			return "reading the directory"
		}
		if op == OpManage {
			return "this request"
		}
		if op == OpManageGroups {
			return "managing groups"
		}
		return string(op)
	}
	if secured {
		return fmt.Sprintf("%s on Thing %q (its TD requires security)", op, thing.ID)
	}
	return fmt.Sprintf("%s on Thing %q", op, thing.ID)
}

// securedTD reports whether a TD requires security: its security names a
// securityDefinitions entry whose scheme is not nosec (an unknown name
// counts as secured: the TD asked for something the hub cannot check).
func securedTD(doc map[string]any) bool {
	defs, _ := doc["securityDefinitions"].(map[string]any)
	var names []string
	switch v := doc["security"].(type) {
	case string:
		names = []string{v}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				names = append(names, s)
			}
		}
	}
	for _, n := range names {
		def, ok := defs[n].(map[string]any)
		if !ok {
			return true
		}
		if scheme, _ := def["scheme"].(string); scheme != "nosec" {
			return true
		}
	}
	return false
}

// principalKey keys a Principal in a context.
type principalKey struct{}

// ContextWithPrincipal returns ctx carrying p: a door that resolved who
// asks hands it to a handler of another package (the MCP door behind
// the HTTP server).
func ContextWithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the Principal ContextWithPrincipal put in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
