package hub

// PassFinal ends a delivery whose final result arrived: it passes the
// intermediate results already queued on ch, in order, then final. An
// agent sends every intermediate result before its final one on one
// connection, so they are all queued by then, and the consumer must get
// them before the one final result (PROTOCOL §3.3). pass reports done when
// a result ended the delivery (a failure to emit ends it too).
func PassFinal[T any](ch <-chan T, final T, pass func(T) (done bool, err error)) error {
	for {
		select {
		case m := <-ch:
			if done, err := pass(m); done || err != nil {
				return err
			}
		default:
			_, err := pass(final)
			return err
		}
	}
}
