/**
 * A form's submit handler: the page stays (the pages' CSP has `form-action 'none'`, so a real submit would be
 * refused anyway) and `action` runs; its promise reports through the page's own state, not here.
 *
 *   <form onsubmit={submitTo(unlock)}>
 */
export function submitTo(action: () => unknown): (e: Event) => void {
  return (e) => {
    e.preventDefault();
    void action();
  };
}
