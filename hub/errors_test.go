package hub

import (
	"errors"
	"fmt"
	"testing"
)

func TestRefusalReason(t *testing.T) {
	limited := &Error{Code: EFULL, Message: "full", Limit: "registry.maxThings"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("boom"), EINTERNAL},
		{Errorf(EINVALID, "bad"), EINVALID},
		{limited, "registry.maxThings"},
		{fmt.Errorf("join: %w", limited), "registry.maxThings"},
	} {
		if got := RefusalReason(c.err); got != c.want {
			t.Errorf("RefusalReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
