/** Style sheets imported for esbuild to bundle (src/web/assets.ts). */
declare module '*.css';
