package hub

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/eclipse-lmos/lmos-hub/lmos"
)

// Context URIs the hub recognises or adds.
const (
	ContextTD11      = "https://www.w3.org/2022/wot/td/v1.1"
	ContextTD10      = "https://www.w3.org/2019/wot/td/v1"
	ContextDiscovery = "https://www.w3.org/2022/wot/discovery"
	ContextLMOS      = lmos.ContextLMOS
)

// Enriched returns doc, the Thing's document, as the directory serves it:
// the discovery context added, registration information, and the
// lmos:presence, lmos:origin and lmos:verified hub extensions. Only the top
// level is copied; doc is not changed.
func (t *Thing) Enriched(doc map[string]any, now time.Time) map[string]any {
	out := make(map[string]any, len(doc)+4)
	for k, v := range doc {
		out[k] = v
	}
	if c, ok := doc["@context"]; ok {
		out["@context"] = enrichedContext(c)
	}
	reg := map[string]any{
		"created":   formatTime(t.Meta.Created),
		"modified":  formatTime(t.Meta.Modified),
		"retrieved": formatTime(now),
	}
	if !t.Meta.Expires.IsZero() {
		reg["expires"] = formatTime(t.Meta.Expires)
	}
	if t.Meta.TTL > 0 {
		reg["ttl"] = json.Number(strconv.FormatInt(t.Meta.TTL, 10))
	}
	out["registration"] = reg
	presence := map[string]any{"status": t.Meta.Presence.Status, "since": formatTime(t.Meta.Presence.Since)}
	if t.Meta.Presence.Via != "" {
		presence["via"] = string(t.Meta.Presence.Via)
	}
	out["lmos:presence"] = presence
	origin := map[string]any{"source": string(t.Meta.Origin.Source)}
	if t.Meta.Origin.Hub != "" {
		origin["hub"] = t.Meta.Origin.Hub
	}
	out["lmos:origin"] = origin
	if t.Meta.Verified != "" {
		out["lmos:verified"] = t.Meta.Verified
	} else {
		delete(out, "lmos:verified") // only the hub may claim verification
	}
	return out
}

// lmosContext is the term definition that lets a JSON-LD processor expand
// the lmos:* members the hub adds to every TD it serves; legacyContext is
// the one earlier versions added, which JSON-LD 1.1 does not use as a
// prefix (lmos.ContextLMOSLegacy).
var (
	lmosContext   = map[string]any{"lmos": ContextLMOS}
	legacyContext = map[string]any{"lmos": lmos.ContextLMOSLegacy}
)

// enrichedContext is ctx with what the hub's additions need: the discovery
// context (registration) and the lmos prefix (lmos:presence, lmos:origin).
// A context that already defines lmos keeps its own definition, except
// that the legacy IRI (no '#') becomes ContextLMOS, so that every served
// TD's lmos:* terms expand; the proof's own @context keeps the signed one
// (StripEnrichment).
func enrichedContext(ctx any) any { return extendContext(ctx, lmosContext, true) }

// legacyEnrichedContext is ctx as versions before the '#' served it: the
// legacy lmos term added, an agent's own definition kept as it was.
func legacyEnrichedContext(ctx any) any { return extendContext(ctx, legacyContext, false) }

// extendContext adds the discovery context and term (unless an entry
// defines lmos) to ctx; upgrade turns a legacy lmos definition into
// ContextLMOS.
func extendContext(ctx any, term map[string]any, upgrade bool) any {
	switch c := ctx.(type) {
	case string:
		if c == ContextDiscovery {
			return []any{c, term}
		}
		return []any{c, ContextDiscovery, term}
	case []any:
		hasDiscovery := slices.Contains(c, any(ContextDiscovery))
		hasLMOS, legacyAt := false, -1
		for i, e := range c {
			if m, ok := e.(map[string]any); ok {
				if v, ok := m["lmos"]; ok {
					hasLMOS = true
					if v == lmos.ContextLMOSLegacy && upgrade {
						legacyAt = i
					}
				}
			}
		}
		if hasDiscovery && hasLMOS && legacyAt < 0 {
			return c
		}
		out := make([]any, 0, len(c)+2)
		// TD 1.1 requires the TD context first; discovery goes right after
		// the plain URIs, before any prefix-definition objects.
		i := 0
		for i < len(c) {
			if _, ok := c[i].(string); !ok {
				break
			}
			i++
		}
		out = append(out, c[:i]...)
		if !hasDiscovery {
			out = append(out, ContextDiscovery)
		}
		out = append(out, c[i:]...)
		if legacyAt >= 0 {
			at := legacyAt + len(out) - len(c) // shifted by the discovery context
			m := maps.Clone(c[legacyAt].(map[string]any))
			m["lmos"] = ContextLMOS
			out[at] = m
		}
		if !hasLMOS {
			out = append(out, term)
		}
		return out
	default:
		return ctx
	}
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
