// Package archtest holds the test that keeps the import rule of
// STYLE.md true: leaf packages import no other project package, and
// scheduler and worker never import each other. It has no code.
package archtest
