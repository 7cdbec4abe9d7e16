package hub

import "github.com/eclipse-lmos/lmos-hub/lmos"

// ThingFailure is the detail of a failed interaction whose Thing did not
// say why (PROTOCOL §10: the consumer gets 502 with the Thing's texts when
// it sent any, this otherwise).
const ThingFailure = "the Thing reported a failure"

// ThingProblem is the problem of an interaction a Thing reported failed:
// the Thing's own problem when it sent one, else the hub's EFAILED (502)
// problem saying so. Every door answers a failed interaction with it.
func ThingProblem(p *lmos.Problem) lmos.Problem {
	if p != nil {
		return *p
	}
	return ProblemOf(Errorf(EFAILED, ThingFailure))
}
