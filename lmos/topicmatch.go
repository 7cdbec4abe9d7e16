package lmos

import "strings"

// TopicMatch reports whether the topic name matches filter (MQTT 5 §4.7:
// "+" one level, "#" the rest, the parent level included; a filter
// beginning with a wildcard does not match $ topics).
func TopicMatch(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			// "a/#" matches "a" too.
			return fmore == tmore || (!tmore && frest == "#")
		}
		filter, topic = frest, trest
	}
}

// FilterCovers reports whether every topic the filter f (or topic name)
// can match is matched by the filter area too: a SUBSCRIBE to f stays
// inside area.
func FilterCovers(area, f string) bool {
	for {
		al, arest, amore := strings.Cut(area, "/")
		if al == "#" {
			return true
		}
		fl, frest, fmore := strings.Cut(f, "/")
		switch {
		case fl == "#":
			return false // f reaches levels area does not
		case al == "+":
		case fl == "+" || al != fl:
			return false
		}
		if !amore || !fmore {
			// "a/#" covers "a" too.
			return amore == fmore || (!fmore && arest == "#")
		}
		area, f = arest, frest
	}
}
