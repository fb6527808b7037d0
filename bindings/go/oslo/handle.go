package oslo

import (
	"sync"
	"sync/atomic"
)

// node is the state of one C object: how to free it and which nodes depend
// on it (closed first). The values users hold (*Context, *Tensor, ...)
// carry the finalizers and point at their node and at what they depend on;
// nodes never point back at those values, so a context's list of children
// never keeps a child, and no cycle holds a finalizer.
type node struct {
	destroy  func()      // frees the C object; nil for a borrowed one
	closed   atomic.Bool // written under tree, read without it
	parents  []*node
	children map[*node]struct{}
}

// tree guards every node's parents and children and the closing of nodes.
var tree sync.Mutex

// newNode registers a live C object under the nodes it depends on.
func newNode(destroy func(), parents ...*node) *node {
	n := &node{destroy: destroy}
	tree.Lock()
	defer tree.Unlock()
	for _, p := range parents {
		n.addParentLocked(p)
	}
	return n
}

// dependOn makes n close whenever p closes (n closes first).
func (n *node) dependOn(p *node) {
	tree.Lock()
	defer tree.Unlock()
	n.addParentLocked(p)
}

func (n *node) addParentLocked(p *node) {
	if p == nil {
		return
	}
	if p.children == nil {
		p.children = make(map[*node]struct{})
	}
	p.children[n] = struct{}{}
	n.parents = append(n.parents, p)
}

// ok reports whether the object can be used: not nil and not closed.
func (n *node) ok() bool {
	if n == nil {
		return false
	}
	return !n.closed.Load()
}

// close closes what depends on n, then n. Idempotent.
func (n *node) close() {
	if n == nil {
		return
	}
	tree.Lock()
	defer tree.Unlock()
	n.closeLocked()
}

func (n *node) closeLocked() {
	if n.closed.Load() {
		return
	}
	n.closed.Store(true)
	for c := range n.children {
		c.closeLocked()
	}
	n.children = nil
	for _, p := range n.parents {
		delete(p.children, n)
	}
	n.parents = nil
	if n.destroy != nil {
		n.destroy()
		n.destroy = nil
	}
}

// openChildren counts the live objects that depend on n.
func (n *node) openChildren() int {
	tree.Lock()
	defer tree.Unlock()
	return len(n.children)
}
