package lmos

import "testing"

func TestTopicMatch(t *testing.T) {
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+", "a", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/+/c", "a//c", true},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
	} {
		if got := TopicMatch(c.filter, c.topic); got != c.want {
			t.Errorf("TopicMatch(%q, %q) = %v, want %v", c.filter, c.topic, got, c.want)
		}
	}
}

func TestFilterCovers(t *testing.T) {
	for _, c := range []struct {
		area, f string
		want    bool
	}{
		{"site/#", "site/#", true},
		{"site/#", "site/a/+", true},
		{"site/#", "site", true},
		{"site/#", "#", false},
		{"site/#", "+/a", false},
		{"site/+", "site/a", true},
		{"site/+", "site/+", true},
		{"site/+", "site/#", false},
		{"site/+", "site/a/b", false},
		{"site/a", "site/+", false},
		{"site/a", "site/a", true},
		{"site/a", "site", false},
		{"site/a/#", "site/b/#", false},
	} {
		if got := FilterCovers(c.area, c.f); got != c.want {
			t.Errorf("FilterCovers(%q, %q) = %v, want %v", c.area, c.f, got, c.want)
		}
	}
}
