package agentsociety

import (
	"strconv"
	"strings"
)

func itoa(n int) string { return strconv.Itoa(n) }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
