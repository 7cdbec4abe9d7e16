package hub

import (
	"context"
	"errors"

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
