package hub

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/eclipse-lmos/lmos-hub/internal/jsonx"
	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// ProblemOf describes err as a problem, with the status lmos's table gives
// its code. A cancelled or timed-out context
// that no *Error explains counts as unavailable; unknown errors as
// internal, without their text.
func ProblemOf(err error) lmos.Problem {
	var e *Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		err = &Error{Code: EUNAVAILABLE, Message: "the request was cancelled or timed out", Err: err}
	}
	status, ok := lmos.StatusOf(ErrorCode(err))
	if !ok {
		status, _ = lmos.StatusOf(EINTERNAL)
	}
	p := lmos.ProblemFor(status, ErrorMessage(err))
	p.ValidationErrors = ErrorFields(err)
	return p
}

// PeerProblem reads the problem object a Thing or peer sent (an agent's
// failure, an error message over WebSocket), keeping only well-typed
// members, cut to bounded lengths: a peer's text is passed on to consumers
// and logs. status may be a number or, as kotlin-wot sends it, a string; 0
// when absent.
func PeerProblem(obj map[string]any) lmos.Problem {
	get := func(k string, n int) string {
		s, _ := obj[k].(string)
		return Truncate(s, n)
	}
	p := lmos.Problem{Type: get("type", 512), Title: get("title", 512), Detail: get("detail", 4096), Instance: get("instance", 512)}
	switch s := obj["status"].(type) {
	case string:
		p.Status, _ = strconv.Atoi(s)
	default:
		// A status beyond any int (1e400 reads as +Inf) is no status.
		if f, ok := jsonx.Number(s); ok && !math.IsInf(f, 0) {
			p.Status = int(f)
		}
	}
	return p
}

// Truncate cuts s to at most n bytes without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
