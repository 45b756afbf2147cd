// Browser-side KaTeX (only when the site is built with MATH_RENDER=browser).
// Material's instant navigation swaps the page without a reload: render on every document$.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: true,
  });
});
