/**
 * A wide table's own sideways scroll, so that at a phone's width (375 px) the page itself never
 * scrolls sideways: a region named `label`, focusable while its content is wider than it, so that
 * the keyboard can scroll it then (and Tab does not stop at every table that fits).
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

export function Scroll({ label, children }: { label: string; children: ComponentChildren }) {
  const box = useRef<HTMLDivElement>(null);
  const [wider, setWider] = useState(false);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const measure = () => setWider(element.scrollWidth > element.clientWidth);
    // The box resizes with the window, its table as rows arrive: either can change which is wider.
    const observer = new ResizeObserver(measure);
    observer.observe(element);
    if (element.firstElementChild) observer.observe(element.firstElementChild);
    return () => observer.disconnect();
  }, []);
  return (
    <div ref={box} class="scroll" role="region" aria-label={label} tabIndex={wider ? 0 : undefined}>
      {children}
    </div>
  );
}
