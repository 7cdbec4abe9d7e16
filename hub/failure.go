package hub

import "github.com/eclipse-lmos/lmos-hub/lmos"

// ThingFailure is the detail of a failed interaction whose Thing did not
// say why (PROTOCOL §10: the consumer gets 502 with the Thing's texts when
// it sent any, this otherwise).
const ThingFailure = "the Thing reported a failure"

// ThingFailed is the problem of an interaction a Thing reported failed,
// whatever transport the Thing is on: the hub's EFAILED problem (502,
// detail ThingFailure) with the Thing's type, title, detail and instance
// wherever peer (its problem object, nil when it sent none) has them as
// non-empty strings (PROTOCOL §10). The status is 502 whatever the Thing
// claims: the Thing failed, not the hub.
func ThingFailed(peer map[string]any) lmos.Problem {
	p := ProblemOf(Errorf(EFAILED, ThingFailure))
	got := lmos.PeerProblem(peer)
	for _, m := range []struct{ to, from *string }{
		{&p.Type, &got.Type}, {&p.Title, &got.Title}, {&p.Detail, &got.Detail}, {&p.Instance, &got.Instance},
	} {
		if *m.from != "" {
			*m.to = *m.from
		}
	}
	return p
}

// ThingProblem is the problem a door answers a failed interaction with:
// the one its transport built (ThingFailed), or ThingFailed(nil) when it
// has none.
func ThingProblem(p *lmos.Problem) lmos.Problem {
	if p != nil {
		return *p
	}
	return ThingFailed(nil)
}
