// A circular doubly linked list of PolicyHooks with a sentinel. Every policy
// is built from these; front is the newest end, back the eviction end.
#pragma once

#include <cassert>
#include <cstddef>

#include "memory/policy/eviction_policy.h"

namespace tierkv::memory {

class HookList {
 public:
  HookList() { head_.prev = head_.next = &head_; }
  HookList(const HookList&) = delete;
  HookList& operator=(const HookList&) = delete;

  bool empty() const { return head_.next == &head_; }
  size_t size() const { return size_; }
  size_t bytes() const { return bytes_; }
  PolicyHook* front() { return empty() ? nullptr : head_.next; }
  PolicyHook* back() { return empty() ? nullptr : head_.prev; }
  // Neighbours that stop at the ends (nullptr past them).
  PolicyHook* newer(PolicyHook* h) { return h->prev == &head_ ? nullptr : h->prev; }
  PolicyHook* older(PolicyHook* h) { return h->next == &head_ ? nullptr : h->next; }

  void push_front(PolicyHook* h) { link_after(&head_, h); }
  void push_back(PolicyHook* h) { link_after(head_.prev, h); }
  // Inserts h just newer than `pos` (i.e. before it in front-to-back order).
  void insert_before(PolicyHook* pos, PolicyHook* h) { link_after(pos->prev, h); }
  // Inserts h just older than `pos` (after it in front-to-back order).
  void insert_after(PolicyHook* pos, PolicyHook* h) { link_after(pos, h); }

  void unlink(PolicyHook* h) {
    assert(h->linked);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->prev = h->next = nullptr;
    h->linked = false;
    --size_;
    bytes_ -= h->bytes;
  }
  void move_to_front(PolicyHook* h) {
    unlink(h);
    push_front(h);
  }

 private:
  void link_after(PolicyHook* pos, PolicyHook* h) {
    assert(!h->linked);
    h->prev = pos;
    h->next = pos->next;
    pos->next->prev = h;
    pos->next = h;
    h->linked = true;
    ++size_;
    bytes_ += h->bytes;
  }

  PolicyHook head_;
  size_t size_ = 0;
  size_t bytes_ = 0;
};

}  // namespace tierkv::memory
