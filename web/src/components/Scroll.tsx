/**
 * A wide table's own sideways scroll, so that at a phone's width (375 px) the page itself never
 * scrolls sideways: a region named `label`, focusable so that the keyboard can scroll it too.
 */
import type { ComponentChildren } from 'preact';

export function Scroll({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <div class="scroll" role="region" aria-label={label} tabIndex={0}>
      {children}
    </div>
  );
}
