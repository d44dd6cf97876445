// ESLint for the ATTENTION tab's JavaScript: plain ES modules run by the browser (viz/tab/static), and their
// unit tests run by node (tests/js). `npm ci`, then `npx eslint`.
import js from "@eslint/js";
import globals from "globals";

export default [
  js.configs.recommended,
  {
    files: ["viz/tab/static/**/*.js"],
    languageOptions: {ecmaVersion: "latest", sourceType: "module", globals: globals.browser},
  },
  {
    files: ["tests/js/**/*.mjs", "eslint.config.js"],
    languageOptions: {ecmaVersion: "latest", sourceType: "module", globals: globals.node},
  },
];
