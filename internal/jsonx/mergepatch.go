package jsonx

// MergePatch applies an RFC 7396 JSON merge patch to target and returns the result. It never mutates target
// or patch (copy what you change). If patch is not an object the result is patch itself.
//
// Every object on the path of a change is a fresh map, so callers may set
// members of the result (the Registry sets "id"). Values the patch does not
// touch, and non-object values taken from the patch, are shared with the
// inputs: treat them as read-only.
func MergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, _ := target.(map[string]any) // a non-object target is replaced by {} (RFC 7396 §2)
	out := make(map[string]any, len(t)+len(p))
	for k, v := range t {
		out[k] = v
	}
	for k, v := range p {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = MergePatch(out[k], v)
	}
	return out
}

// CreateMergePatch returns the RFC 7396 merge patch that turns from into to (both JSON objects as decoded
// by encoding/json, possibly with json.Number values): removed members → nil (JSON null), changed
// non-object values (arrays, scalars) → the new value, nested objects → recursive patch (omitted when equal).
// MergePatch(from, CreateMergePatch(from, to)) must deep-equal to.
//
// RFC 7396 cannot express a member whose new value is null (null in a patch
// means "remove"), so a null member of to is treated as removed: the patch
// removes it from from, and applying the patch yields to without it. The
// round trip is exact only when to holds no nulls. The result is never nil
// (an empty map when nothing changed) and may share non-object values with to.
func CreateMergePatch(from, to map[string]any) map[string]any {
	patch := map[string]any{}
	for k := range from {
		if tv, ok := to[k]; !ok || tv == nil {
			// Also when from's value is null: the member was present and
			// must go.
			patch[k] = nil
		}
	}
	for k, tv := range to {
		if tv == nil {
			continue // handled above: removed, or absent in from anyway
		}
		fv, inFrom := from[k]
		tm, toIsObj := tv.(map[string]any)
		fm, fromIsObj := fv.(map[string]any)
		switch {
		case toIsObj && fromIsObj:
			if sub := CreateMergePatch(fm, tm); len(sub) > 0 {
				patch[k] = sub
			}
		case toIsObj:
			// Merging an object into a non-object starts from {}, so the
			// full object (minus its nulls) is the patch, even when empty.
			patch[k] = CreateMergePatch(nil, tm)
		case !inFrom || !Equal(fv, tv):
			patch[k] = tv
		}
	}
	return patch
}
