package code

// Hello says hello.
func Hello() string { return "hello" }

// T is a type.
type T struct{}

// Name returns the name.
func (T) Name() string { return "t" }
