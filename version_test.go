package twinmq

import (
	"os"
	"regexp"
	"testing"
)

// The version a program reports (Version) and the one the changelog
// describes must be the same; a release that bumps one and not the other
// fails here.
func TestVersionMatchesChangelog(t *testing.T) {
	data, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Version) {
		t.Fatalf("Version %q is not MAJOR.MINOR.PATCH", Version)
	}
	// The first heading with a number is the latest version.
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(data)
	if m == nil {
		t.Fatal("CHANGELOG.md has no version heading")
	}
	if got := string(m[1]); got != Version {
		t.Fatalf("CHANGELOG.md's latest version is %s, Version is %s", got, Version)
	}
}
